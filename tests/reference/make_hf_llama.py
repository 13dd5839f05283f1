#!/usr/bin/env python3
"""Writes tests/reference/hf_llama_tiny/, a tiny random LlamaForCausalLM saved by transformers
itself (save_pretrained: config.json, sharded bf16 model-*.safetensors with their index,
generation_config.json) with a byte-level BPE tokenizer trained by the `tokenizers` library
(tokenizer.json, tokenizer_config.json, special_tokens_map.json), and
tests/reference/hf_llama_tiny.json: transformers' float32 logits on fixed ids and the
tokenizers library's ids for a set of strings. tests/test_hf_import.cpp imports the folder and
checks both. The folder is committed (about 150 KB), so the test runs without Python.

The model has what our import must get right: grouped-query attention (4 heads, 2 kv heads),
untied embeddings, a RoPE base other than the default, rms_norm_eps 1e-5, bfloat16 weights
(converted to float32 on import) in several shards. The tokenizer uses SmolLM2's
pre-tokenizer (individual digits, then GPT-2 byte-level), three special tokens, and
tokenizers' current merges format (["a", "b"] pairs).

usage: make_hf_llama.py   (needs torch, transformers, tokenizers; deterministic for a given
                           version of them: seeds fixed)
"""
import json
import os
import random
import shutil

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "hf_llama_tiny")
REF = os.path.join(HERE, "hf_llama_tiny.json")
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]

# Strings whose ids the C++ test compares: ASCII, runs of spaces, tabs and newlines, digits,
# contractions, unicode (accents, CJK, emoji, a combining mark), special tokens in text.
STRINGS = [
    "hello world",
    "The quick brown fox jumps over the lazy dog.",
    "  two  spaces   three\tand a tab",
    "line one\nline two\n\n\nend",
    "digits 1234567890 and 3.14159, 2024-06-01",
    "don't we'll they're I'm you've she'd",
    "caf\u00e9 na\u00efve \u00fcber \u65e5\u672c\u8a9e \U0001f642 e\u0301",
    "<|im_start|>user\nhi there<|im_end|>\n<|endoftext|>",
    "    def f(x):\n        return x + 1\n",
    "",
]


def corpus():
    rng = random.Random(0)
    words = ("the of and to in is was for on that with as by at from this be are it an or which have not "
             "model token layer attention train data loss value weight head kernel feature python import "
             "return def class self if else while print").split()
    lines = []
    for _ in range(400):
        n = rng.randint(3, 14)
        line = " ".join(rng.choice(words) for _ in range(n))
        if rng.random() < 0.3:
            line += " " + str(rng.randint(0, 99999))
        if rng.random() < 0.2:
            line = "    " + line + ":"
        lines.append(line.capitalize() if rng.random() < 0.5 else line)
    lines += ["caf\u00e9 na\u00efve \u00fcber", "\u65e5\u672c\u8a9e \U0001f642", "don't we'll they're"] * 5
    return lines


def make_tokenizer():
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.Digits(individual_digits=True), pre_tokenizers.ByteLevel(add_prefix_space=False)])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=360, special_tokens=SPECIALS, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(corpus(), trainer)
    return tok


def main():
    torch.manual_seed(0)
    if os.path.exists(OUT):
        shutil.rmtree(OUT)
    tok = make_tokenizer()
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<|im_start|>", eos_token="<|endoftext|>",
                                   clean_up_tokenization_spaces=False)
    fast.save_pretrained(OUT)

    config = LlamaConfig(vocab_size=tok.get_vocab_size(), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64, rms_norm_eps=1e-5,
                         rope_theta=500.0, tie_word_embeddings=False, bos_token_id=fast.bos_token_id,
                         eos_token_id=fast.eos_token_id)
    model = LlamaForCausalLM(config).eval()
    with torch.no_grad():  # weights larger than the default 0.02 so the logits are not all alike
        for p in model.parameters():
            if p.dim() == 2:
                p.normal_(0.0, 0.2)
    model = model.to(torch.bfloat16)
    model.save_pretrained(OUT, max_shard_size="40KB")

    # Reference: the saved bf16 weights, upcast (exactly) to float32, as our import does.
    loaded = LlamaForCausalLM.from_pretrained(OUT, dtype=torch.float32).eval()
    rng = random.Random(1)
    ids = [rng.randrange(config.vocab_size) for _ in range(12)]
    with torch.no_grad():
        logits = loaded(torch.tensor([ids])).logits[0]
    encodings = [{"text": s, "ids": tok.encode(s, add_special_tokens=False).ids} for s in STRINGS]
    ref = {
        "generated_by": "tests/reference/make_hf_llama.py",
        "versions": {"torch": torch.__version__, "transformers": __import__("transformers").__version__,
                     "tokenizers": __import__("tokenizers").__version__},
        "ids": ids,
        "logits": [[round(float(v), 7) for v in row] for row in logits],
        "encodings": encodings,
        "bos_id": fast.bos_token_id,
        "eos_id": fast.eos_token_id,
    }
    with open(REF, "w") as f:
        json.dump(ref, f, indent=0, ensure_ascii=False)
        f.write("\n")
    total = sum(os.path.getsize(os.path.join(OUT, n)) for n in os.listdir(OUT))
    print(f"wrote {OUT} ({total} bytes: {sorted(os.listdir(OUT))}) and {REF}")


if __name__ == "__main__":
    main()
