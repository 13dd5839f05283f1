#!/usr/bin/env python3
"""Reference ids with bos for tests/test_data_bos.cpp: what Hugging Face transformers' own
tokenizer gives with add_special_tokens=True (its default) for the two released models we
import, Gemma 3 270M (add_bos_token true: bos first) and SmolLM2-135M-Instruct (false: no bos).
The tokenizers are transformers' conversions of the GGUF files' metadata
(AutoTokenizer.from_pretrained(folder, gguf_file=...)), independent of darkformer's code.

  cache/venv-torch/bin/pip install transformers gguf sentencepiece   (torch from scripts/torch-venv.sh)
  scripts/fetch-models.sh all
  cache/venv-torch/bin/python tests/reference/make_bos_reference.py
Writes tests/reference/bos_hf.json.
"""
import json
import os

import transformers
from transformers import AutoTokenizer

HERE = os.path.dirname(os.path.abspath(__file__))
MODELS = os.path.join(HERE, "..", "..", "cache", "models")
FILES = {"gemma3": "gemma-3-270m-q4_k_m.gguf", "smollm2": "SmolLM2-135M-Instruct.Q4_1.gguf"}
# Documents of a small corpus (one file each in the test) and prompts.
TEXTS = [
    "The quick brown fox jumps over the lazy dog.\n",
    "Attention is all you need.\nRandom features approximate the softmax kernel.\n",
    "def f(x):\n    return x + 1\n",
    "caf\u00e9 \u00fcber \u65e5\u672c\u8a9e 12345\n",
    "Hello",
]


def main():
    out = {"format": "darkformer bos reference v1", "generator": "tests/reference/make_bos_reference.py",
           "reference": f"transformers {transformers.__version__}: AutoTokenizer.from_pretrained(gguf_file=...)"
                        "(text)['input_ids'] (add_special_tokens=True)",
           "texts": TEXTS, "models": {}}
    for name, file in FILES.items():
        tok = AutoTokenizer.from_pretrained(os.path.join(MODELS, name), gguf_file=file)
        out["models"][name] = {"file": file, "bos_id": tok.bos_token_id, "eos_id": tok.eos_token_id,
                               "ids": [tok(t)["input_ids"] for t in TEXTS]}
    with open(os.path.join(HERE, "bos_hf.json"), "w") as f:
        json.dump(out, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
