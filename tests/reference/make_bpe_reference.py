#!/usr/bin/env python3
"""Reference token ids for data/bpe_tokenizer.cpp on the SmolLM2-135M-Instruct GGUF.

Reads the tokenizer.ggml.* metadata with gguf-py and rebuilds the tokenizer with Hugging Face
`tokenizers` exactly as SmolLM2's tokenizer.json defines it: BPE(vocab, merges), pre-tokenizer
Sequence[Digits(individual_digits=True), ByteLevel(add_prefix_space=False, use_regex=True)],
no normalizer, the control tokens (token type 3/4) as special added tokens. (transformers'
own GGUF loader needs torch and drops the Digits step, so it is not used.) When
llama-cpp-python is installed, every case is also tokenized by llama.cpp
(Llama(vocab_only=True).tokenize(..., add_bos=False, special=True)) and the agreement is
recorded. Writes tests/reference/bpe_smollm2.json.

  pip install tokenizers gguf [llama-cpp-python]
  python3 tests/reference/make_bpe_reference.py [--model PATH] [--out PATH]
"""
import argparse
import hashlib
import importlib.metadata
import json
import os
import sys

import gguf
import tokenizers
from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
DEFAULT_MODEL = os.path.join(ROOT, "cache/models/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf")

CASES = [
    "",
    "Hello world",
    "The quick brown fox jumps over the lazy dog.",
    "  leading and trailing spaces   ",
    "multiple   spaces\tand\ttabs",
    "line one\nline two\n\nline four\n",
    "\n\n\n",
    "crlf line\r\nnext\r\n",
    "12345 and 3.14",
    "Version 2.0.1 released on 2024-11-05 at 09:30, costs $1,299.99 (-15%)",
    "I'm sure you're right, they'll say we've done it and he'd agree; it's John's.",
    "DON'T SHOUT, O'Neil's 'quoted' text",
    "def main():\n    for i in range(10):\n        print(i ** 2)\n    return 0\n",
    "if (x) {\n\treturn y;\t// tab comment\n}\n",
    "#include <vector>\nint main() { std::vector<int> v{1, 2, 3}; }",
    "Café naïve résumé façade Ærøskøbing",
    "Привет, мир! Γειά σου κόσμε",
    "日本語のテキストと中文文本",
    "한국어 텍스트",
    "emoji 😀🎉👍🏽 and flags 🇫🇷🇩🇪!",
    "superscript x² and fractions ½ ¾, arabic digits ٣٤٥",
    "no\u00a0break\u2003em space\u3000ideographic",
    "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\nHello! How can I help?<|im_end|>\n",
    "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n",
    "text<|endoftext|>more text <|endoftext|> <repo_name>name<file_sep>",
    "almost special <|im_star|> and <|im_end and <|",
    "https://huggingface.co/HuggingFaceTB/SmolLM2-135M-Instruct?query=a&b=c#frag",
    "=" * 100 + "\n" + "-" * 70,
    "Pneumonoultramicroscopicsilicovolcanoconiosis" * 3,
    "mixedCASEWordsAndCamelCase snake_case_words kebab-case-words",
    "   \n  \t ",
    "!!!???...,,,;;;:::",
    "a" * 200,
    # Bytes without a piece in SmolLM2's vocabulary (0x04, 0x1D, 0x13; 0xF1 leads U+40000):
    # dropped before merging, so " " and U+200B merge across 0x1D (llama.cpp does not).
    "H\x04ello w\x1dorld \U00040000 x\x13y",
    "a \x1d\u200b b",
]


def bytes_to_unicode():
    """GPT-2's byte -> unicode character table."""
    bs = list(range(0x21, 0x7F)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


def load_vocab(path):
    reader = gguf.GGUFReader(path)
    f = reader.fields

    def strings(key):
        field = f[key]
        return [bytes(field.parts[i]).decode("utf-8") for i in field.data]

    def ints(key):
        field = f[key]
        return [int(field.parts[i][0]) for i in field.data]

    def scalar(key):
        field = f[key]
        return field.parts[field.data[0]][0]

    assert bytes(f["tokenizer.ggml.model"].parts[f["tokenizer.ggml.model"].data[0]]).decode() == "gpt2"
    pre = bytes(f["tokenizer.ggml.pre"].parts[f["tokenizer.ggml.pre"].data[0]]).decode()
    assert pre == "smollm", pre
    return {
        "tokens": strings("tokenizer.ggml.tokens"),
        "merges": strings("tokenizer.ggml.merges"),
        "types": ints("tokenizer.ggml.token_type"),
        "unk": int(scalar("tokenizer.ggml.unknown_token_id")),
    }


def build_hf(v):
    vocab = {t: i for i, t in enumerate(v["tokens"])}
    merges = [tuple(m.split(" ", 1)) for m in v["merges"]]
    # unk_token None: a byte without a piece is dropped (as llama.cpp does), not mapped to unk.
    tok = Tokenizer(models.BPE(vocab, merges, unk_token=None, fuse_unk=False, byte_fallback=False))
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.Digits(individual_digits=True),
         pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)])
    tok.decoder = decoders.ByteLevel()
    specials = [AddedToken(t, special=True, normalized=False, lstrip=False, rstrip=False)
                for t, ty in zip(v["tokens"], v["types"]) if ty in (3, 4)]
    tok.add_special_tokens(specials)
    return tok


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default=DEFAULT_MODEL)
    ap.add_argument("--out", default=os.path.join(HERE, "bpe_smollm2.json"))
    args = ap.parse_args()

    v = load_vocab(args.model)
    hf = build_hf(v)
    byte_piece = bytes_to_unicode()
    tokens = set(v["tokens"])
    missing = {b for b in range(256) if byte_piece[b] not in tokens}
    cases = []
    for text in CASES:
        ids = hf.encode(text, add_special_tokens=False).ids
        # Round trip, less the bytes without a piece.
        kept = bytes(b for b in text.encode("utf-8") if b not in missing).decode("utf-8", errors="replace")
        assert hf.decode(ids, skip_special_tokens=False) == kept, repr(text)
        cases.append({"text": text, "ids": ids})

    cross = "llama-cpp-python not installed: no cross-check"
    try:
        import llama_cpp
    except ImportError:
        llama_cpp = None
    if llama_cpp is not None:
        llm = llama_cpp.Llama(args.model, vocab_only=True, verbose=False)
        bad = []
        for c in cases:
            ids = llm.tokenize(c["text"].encode("utf-8"), add_bos=False, special=True) if c["text"] else []
            if ids != c["ids"]:
                bad.append(c["text"])
                print(f"llama.cpp disagrees on {c['text']!r}:\n  hf    {c['ids']}\n  llama {ids}", file=sys.stderr)
        cross = (f"llama-cpp-python {llama_cpp.__version__} (Llama(vocab_only=True).tokenize(add_bos=False, "
                 f"special=True)): agrees on {len(cases) - len(bad)}/{len(cases)} cases")
        if bad:
            cross += "; disagrees on " + json.dumps(bad, ensure_ascii=False)

    with open(args.model, "rb") as fh:
        sha = hashlib.sha256(fh.read()).hexdigest()
    doc = {
        "format": "darkformer bpe reference v1",
        "generator": "tests/reference/make_bpe_reference.py",
        "reference": (f"huggingface tokenizers {tokenizers.__version__}: BPE from the GGUF vocab and merges, "
                      "Sequence[Digits(individual_digits=True), ByteLevel(add_prefix_space=False, use_regex=True)], "
                      "token types 3/4 as special added tokens, unk_token None; encode(add_special_tokens=False)"),
        "cross_check": cross,
        "missing_bytes": sorted(missing),
        "gguf_py": importlib.metadata.version("gguf"),
        "model": os.path.relpath(os.path.abspath(args.model), ROOT),
        "model_sha256": sha,
        "cases": cases,
    }
    # One line per case.
    head = json.dumps({k: val for k, val in doc.items() if k != "cases"}, ensure_ascii=False, indent=1)
    body = ",\n".join("  " + json.dumps(c, ensure_ascii=False) for c in cases)
    with open(args.out, "w", encoding="utf-8") as fh:
        fh.write(head[:-2] + ',\n "cases": [\n' + body + "\n ]\n}\n")
    print(f"wrote {args.out}: {len(cases)} cases; {cross}")


if __name__ == "__main__":
    main()
