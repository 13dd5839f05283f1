#!/usr/bin/env python3
"""Reference token ids for data/spm_tokenizer.cpp on the Gemma 3 270M GGUF (SentencePiece).

Runs llama.cpp (through llama-cpp-python, Llama(vocab_only=True)) on the GGUF's tokenizer
(tokenizer.ggml.model "llama") over the committed CASES below and records, for each case:
  ids     llm.tokenize(text, add_bos=True, special=False): what llama_tokenize gives with
          add_special=true, parse_special=false (bos first; only user-defined token text is
          split out, control-token text such as "<eos>" is tokenized as ordinary text)
  detok   llama_detokenize(ids, remove_special=false, unparse_special=false): the pieces
          concatenated, control tokens (bos, eos, ...) giving nothing. (Llama.detokenize in
          Python also drops a leading space after bos, a llama-cpp-python quirk; not used.)
A case whose text (or detok) is not valid UTF-8 is stored as "text_hex" ("detok_hex").
tests/test_gguf_spm_tokenizer.cpp checks darkformer's ids and decode against these.

  python3 -m venv cache/venv-ref && cache/venv-ref/bin/pip install llama-cpp-python gguf numpy
  scripts/fetch-models.sh gemma3
  cache/venv-ref/bin/python tests/reference/make_gemma3_tokenizer_reference.py [--model PATH] [--out PATH]
Writes tests/reference/gemma3_tokenizer.json (one case per line).
"""
import argparse
import ctypes
import hashlib
import json
import os

import llama_cpp

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
DEFAULT_MODEL = os.path.join(ROOT, "cache/models/gemma3/gemma-3-270m-q4_k_m.gguf")

PYTHON_CODE = '''def fib(n):
    """Return the n-th Fibonacci number."""
    a, b = 0, 1
    for _ in range(n):
        a, b = b, a + b
    return a


class Point:
    def __init__(self, x, y):
        self.x = x
        self.y = y

    def __repr__(self):
        return f"Point({self.x}, {self.y})"
'''

CPP_CODE = '''#include <vector>
#include <string>

namespace demo {
// Sum of squares.
template <class T>
T sum_squares(const std::vector<T>& v) {
\tT total{};
\tfor (const T& x : v) {
\t\ttotal += x * x;  // accumulate
\t}
\treturn total;
}
}  // namespace demo

int main(int argc, char** argv) {
    std::vector<int> v{1, 2, 3};
    if (argc > 1 && std::string(argv[1]) == "--help") return 0;
    return demo::sum_squares(v) == 14 ? 0 : 1;
}
'''

CASES = [
    "",
    "Hello world",
    "The quick brown fox jumps over the lazy dog.",
    " leading space",
    "trailing space ",
    "  both ends  ",
    " ",
    "  ",
    "I'm sure you're right, they'll say we've done it; it's John's.",
    "DON'T SHOUT, O'Neil's 'quoted' text and \"double quotes\"",
    # Runs of 2..40 spaces between words (Gemma has user-defined pieces for 2..31 spaces).
    *["a" + " " * n + "b" for n in range(2, 41)],
    " " * 33 + "x",
    "x" + " " * 64,
    "\tindented with a tab",
    "a\tb\t\tc\t\t\td",
    "\t" * 35,
    " \t \t mixed \t",
    "line one\nline two\n\nline four\n",
    "\n",
    "\n\n\n",
    "\n" * 40,
    "crlf line\r\nnext\r\n",
    "a\n \n b\n\t\nc",
    "   \n  \t ",
    "Café naïve résumé façade Ærøskøbing",
    "Привет, мир! Γειά σου κόσμε",
    "日本語のテキストと中文文本",
    "한국어 텍스트",
    "emoji 😀🎉👍🏽 and flags 🇫🇷🇩🇪!",
    "combining: e\u0301 a\u0308 n\u0303 o\u0302\u0323",
    "RTL: مرحبا بالعالم and שלום עולם",
    "नमस्ते दुनिया",
    "math 𝔘𝔫𝔦𝔠𝔬𝔡𝔢 ∀x∈ℝ: x²≥0, ½ ¾",
    "rare \U00040000 plane-4 and \U000e0041 tag",
    "no\u00a0break\u2003em space\u3000ideographic \u200bzero width",
    # U+2581 (SentencePiece's space symbol) in the input itself.
    "\u2581",
    "a\u2581b",
    "\u2581\u2581\u2581 x",
    "\u2581 \u2581",
    PYTHON_CODE,
    CPP_CODE,
    "12345 and 3.14",
    "Version 2.0.1 released on 2024-11-05 at 09:30, costs $1,299.99 (-15%)",
    "0123456789" * 5,
    # Special / user-defined token text in ordinary text.
    "<start_of_turn>user\nHello!<end_of_turn>\n<start_of_turn>model\nHi there.<end_of_turn>\n",
    "<eos>",
    "<bos>text<eos>",
    "<pad><unk><mask>",
    "[multimodal]",
    "<start_of_image> an image <end_of_image>",
    "<unused0> <unused99>",
    "<table><tr><td>cell</td></tr></table>",
    "<h1>Title</h1><div><ul><li>item</li></ul></div>",
    "<s>struck</s> text",
    "almost special <start_of_tur> and <eos and <",
    "https://example.com/path/to/page?query=a&b=c#frag",
    "!!!???...,,,;;;:::",
    "=" * 100 + "\n" + "-" * 70,
    "a" * 200,
    "Pneumonoultramicroscopicsilicovolcanoconiosis" * 3,
    "mixedCASEWordsAndCamelCase snake_case_words kebab-case-words",
    "control \x01\x02 chars \x1b[0m and \x7f",
    # Not valid UTF-8 (stored as text_hex).
    b"bad \xff\xfe utf-8",
    b"\xe2\x96 cut sequence",
    b"\xc3",
    b"nul \x00 byte",
]

PROSE = [
    "Random-feature attention replaces the softmax kernel with an inner product of feature maps.",
    "In 1905, Einstein published four papers; the third one (on special relativity) changed physics.",
    "Das Wetter in München ist heute schön, aber morgen soll es regnen.",
    "Le café est prêt à 8h30 — n'oubliez pas vos clés !",
    "東京は日本の首都です。人口は約1400万人です。",
    "Она сказала: «Это было давно», и улыбнулась.",
]


def long_case():
    """About 20 KB mixing prose, code, whitespace runs, Unicode and special-token text."""
    parts = []
    i = 0
    while sum(len(p.encode("utf-8")) for p in parts) < 20000:
        parts.append(PROSE[i % len(PROSE)])
        parts.append(" " * (1 + i % 37))
        if i % 5 == 0:
            parts.append("\n\n")
        if i % 7 == 0:
            parts.append(PYTHON_CODE if i % 2 else CPP_CODE)
        if i % 11 == 0:
            parts.append("<start_of_turn>user\n" + str(i * 7919) + "<end_of_turn>\n")
        if i % 13 == 0:
            parts.append("\u2581" * (i % 4 + 1) + "x" * (50 + i))
        i += 1
    return "".join(parts)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default=DEFAULT_MODEL)
    ap.add_argument("--out", default=os.path.join(HERE, "gemma3_tokenizer.json"))
    args = ap.parse_args()

    llm = llama_cpp.Llama(args.model, vocab_only=True, verbose=False)
    vocab = llama_cpp.llama_model_get_vocab(llm.model)

    def detokenize(ids):
        arr = (llama_cpp.llama_token * max(1, len(ids)))(*ids)
        size = 1024 + 64 * len(ids)
        buf = ctypes.create_string_buffer(size)
        n = llama_cpp.llama_detokenize(vocab, arr, len(ids), buf, size, False, False)
        assert 0 <= n <= size, n
        return buf.raw[:n]

    cases = []
    for text in CASES + [long_case()]:
        raw = text if isinstance(text, bytes) else text.encode("utf-8")
        ids = llm.tokenize(raw, add_bos=True, special=False)
        detok = detokenize(ids)
        case = {}
        if isinstance(text, bytes):
            case["text_hex"] = raw.hex()
        else:
            case["text"] = text
        case["ids"] = ids
        try:
            case["detok"] = detok.decode("utf-8")
        except UnicodeDecodeError:
            case["detok_hex"] = detok.hex()
        cases.append(case)

    with open(args.model, "rb") as fh:
        sha = hashlib.sha256(fh.read()).hexdigest()
    doc = {
        "format": "darkformer gemma3 tokenizer reference v1",
        "generator": "tests/reference/make_gemma3_tokenizer_reference.py",
        "reference": (f"llama-cpp-python {llama_cpp.__version__}: Llama(vocab_only=True).tokenize(text, add_bos=True, "
                      "special=False); llama_detokenize(ids, remove_special=False, unparse_special=False)"),
        "model": os.path.relpath(os.path.abspath(args.model), ROOT),
        "model_sha256": sha,
    }
    head = json.dumps(doc, ensure_ascii=False, indent=1)
    body = ",\n".join("  " + json.dumps(c, ensure_ascii=False) for c in cases)
    with open(args.out, "w", encoding="utf-8") as fh:
        fh.write(head[:-2] + ',\n "cases": [\n' + body + "\n ]\n}\n")
    print(f"wrote {args.out}: {len(cases)} cases, {os.path.getsize(args.out)} bytes")


if __name__ == "__main__":
    main()
