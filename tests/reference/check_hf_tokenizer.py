#!/usr/bin/env python3
"""Checks the tokenizer of a `darkformer export-hf` folder with Hugging Face transformers:
AutoTokenizer.from_pretrained(EXPORT_DIR) must load from tokenizer.json alone (no protobuf
needed) and give our ids (tests/tools/hf_encode on the run's prepared data, i.e. the
tokenizer the model was trained with) on a set of strings (ASCII, unicode, runs of spaces,
tabs, newlines, digits, special-token text), with the default add_special_tokens=True (bos
first exactly when tokenizer_config.json says add_bos_token, no prefix space added); its
decode must give back our decode; and greedy generation by transformers (the class
config.json's architectures names, LlamaForCausalLM or Gemma3ForCausalLM, or our own
DarkformerForCausalLM through AutoModelForCausalLM with trust_remote_code, with the folder's
generation_config.json) from text prompts must equal `darkformer generate --temperature 0`'s
text. tests/hf_tokenizer_check.sh (ctest: hf_tokenizer_check) and tests/hf_gemma3_check.sh
(hf_gemma3_check) drive it; the sibling check_export_hf.py checks the model alone.

usage: check_hf_tokenizer.py EXPORT_DIR --encode HF_ENCODE --data DATA_DIR
                             --darkformer DARKFORMER --checkpoint RUN [--max-tokens N]
                             [--prompt TEXT]... [--gemma-strings]
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

import torch
import transformers
from transformers import AutoTokenizer, GenerationConfig

STRINGS = [
    "hello world",
    "The quick brown fox jumps over the lazy dog.",
    " leading space",
    "trailing space ",
    "two  spaces   three    four",
    "tabs\tand\ttabs",
    "line one\nline two\n\n\nend\n",
    "\r\n windows line ends\r\n",
    "digits 0123456789, 3.14159 and 2024-06-01",
    "don't we'll they're I'm",
    "caf\u00e9 na\u00efve \u00fcber \u00c5ngstr\u00f6m",
    "\u65e5\u672c\u8a9e\u306e\u30c6\u30ad\u30b9\u30c8 \u4e2d\u6587",
    "emoji \U0001f642\U0001f680 and a combining e\u0301",
    "\u00a0no-break\u3000ideographic space",
    "    def f(x):\n        return x + 1\n",
    "a",
    " ",
    "\n",
    "",
]
# Special-token text in ordinary input: what each kind does with it is part of the contract.
SPECIAL_TEXT = ["</s> <s> <unk>", "<eos> and <bos>", "<|endoftext|>", "<|im_start|>user\nhi<|im_end|>\n"]
PROMPTS = ["The ", "ka to ri", "\n"]
# Gemma 3's user-defined tokens (runs of newlines, spaces and tabs, HTML tags) and chat text.
GEMMA_STRINGS = [
    "<start_of_turn>user\nWhat is 2+2?<end_of_turn>\n<start_of_turn>model\n",
    "para one\n\n\npara two\n\n",
    "\t\tindented with tabs\n    and    spaces",
    "<div class=\"x\"><span>text</span></div>\n<table><tr><td>1</td></tr></table>",
    "[multimodal] <start_of_image> <end_of_image>",
    "Über naïve façades — “quotes” … 12,345.67 €",
    "\u0928\u092e\u0938\u094d\u0924\u0947 \u0645\u0631\u062d\u0628\u0627 \uc548\ub155\ud558\uc138\uc694",
]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("export_dir")
    ap.add_argument("--encode", required=True)
    ap.add_argument("--data", required=True)
    ap.add_argument("--darkformer", required=True)
    ap.add_argument("--checkpoint", required=True)
    ap.add_argument("--max-tokens", type=int, default=24)
    ap.add_argument("--prompt", action="append", help="generation prompt (repeatable); default: a built-in set")
    ap.add_argument("--gemma-strings", action="store_true", help="also Gemma 3's user-defined-token texts")
    args = ap.parse_args()

    if not os.path.isfile(os.path.join(args.export_dir, "tokenizer.json")):
        print(f"FAILED: {args.export_dir} holds no tokenizer.json")
        return 1
    # A folder of our own architecture names its code in config.json's auto_map, which
    # AutoTokenizer reads too (and would ask about): the same trust_remote_code as the model.
    ours_arch = "auto_map" in json.load(open(os.path.join(args.export_dir, "config.json")))
    tok = AutoTokenizer.from_pretrained(args.export_dir, trust_remote_code=ours_arch)
    add_bos = bool(json.load(open(os.path.join(args.export_dir, "tokenizer_config.json"))).get("add_bos_token"))
    strings = STRINGS + (GEMMA_STRINGS if args.gemma_strings else []) + SPECIAL_TEXT
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(strings, f)
    ours = json.loads(subprocess.run([args.encode, "--data", args.data, f.name], check=True, capture_output=True,
                                     text=True).stdout)
    os.unlink(f.name)
    failures = 0
    print(f"{args.export_dir}: our tokenizer {ours['kind']}, transformers {type(tok).__name__} "
          f"(bos {tok.bos_token_id}, eos {tok.eos_token_id}, add_bos_token {add_bos})")
    if tok.eos_token_id != ours["eos_id"] or (ours["bos_id"] >= 0 and tok.bos_token_id != ours["bos_id"]):
        print(f"  special ids differ: ours bos {ours['bos_id']} eos {ours['eos_id']}")
        failures += 1
    for s, ids, decoded in zip(strings, ours["ids"], ours["decoded"]):
        theirs = tok(s)["input_ids"]
        if add_bos:  # the post-processor's bos, then the text's ids
            if theirs[:1] != [ours["bos_id"]]:
                print(f"  no bos first on {s!r}: transformers {theirs}")
                failures += 1
                continue
            theirs = theirs[1:]
        if theirs != ids:
            print(f"  ids differ on {s!r}:\n    ours         {ids}\n    transformers {theirs}")
            failures += 1
            continue
        # decode: ours drops bos/eos; transformers' skip_special_tokens drops every special
        # token, so the text with special tokens in it is compared on ids alone.
        if s not in SPECIAL_TEXT:
            text = tok.decode(ids)
            if text.encode("utf-8") != bytes(decoded):
                print(f"  decode differs on {s!r}: ours {bytes(decoded)!r}, transformers {text!r}")
                failures += 1
    print(f"  ids: {len(strings) - failures} of {len(strings)} strings agree")

    architecture = json.load(open(os.path.join(args.export_dir, "config.json")))["architectures"][0]
    if hasattr(transformers, architecture):
        model = getattr(transformers, architecture).from_pretrained(args.export_dir).eval()  # float32, as exported
    else:  # our own architecture (random-feature attention): its modeling file is in the folder
        model = transformers.AutoModelForCausalLM.from_pretrained(args.export_dir, trust_remote_code=True).eval()
    print(f"  model: {type(model).__name__}")
    generation = GenerationConfig.from_pretrained(args.export_dir)
    assert generation.do_sample is False and generation.eos_token_id == ours["eos_id"], generation
    for prompt in args.prompt or PROMPTS:
        # Both sides start the prompt with bos exactly when the folder says add_bos_token.
        out = subprocess.run([args.darkformer, "generate", "--checkpoint", args.checkpoint, "--prompt", prompt,
                              "--temperature", "0", "--max-tokens", str(args.max_tokens),
                              "--bos", "always" if add_bos else "never"],
                             check=True, capture_output=True).stdout.decode("utf-8", errors="replace")
        assert out.startswith(prompt) and out.endswith("\n"), repr(out)
        ours_text = out[len(prompt):-1]
        ids = tok(prompt)["input_ids"] or [ours["eos_id"]]  # darkformer generate starts an empty prompt at eos
        with torch.no_grad():
            new = model.generate(torch.tensor([ids]), attention_mask=torch.ones(1, len(ids), dtype=torch.long),
                                 generation_config=generation, max_new_tokens=args.max_tokens)[0, len(ids):].tolist()
        theirs_text = tok.decode(new, skip_special_tokens=True)
        # transformers stops after eos (generation_config.json); darkformer generate goes on.
        stopped = len(new) < args.max_tokens
        ok = ours_text.startswith(theirs_text) if stopped else ours_text == theirs_text
        if stopped:
            ok = ok and new[-1] == ours["eos_id"]
        print(f"  greedy from {prompt!r}: {'same' if ok else 'DIFFERENT'} ({len(new)} tokens"
              f"{', stopped at eos' if stopped else ''}): {theirs_text!r}")
        if not ok:
            print(f"    darkformer: {ours_text!r}")
            failures += 1
    print("OK" if failures == 0 else f"FAILED: {failures} difference(s)")
    return 0 if failures == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
