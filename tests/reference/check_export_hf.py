#!/usr/bin/env python3
"""Checks a `darkformer export-hf` folder with Hugging Face transformers: it must load as
LlamaForCausalLM, and its loss on random tokens must equal the independent reference
implementation in gen_model.py (which tests/test_model_reference.cpp ties to our C++ model)
run on the same weights. Needs transformers (e.g. a venv with --system-site-packages over
Debian's python3-torch, pip install transformers==4.40.2); not part of CI.

usage: check_export_hf.py EXPORT_DIR
"""
import json
import os
import sys

import torch
from safetensors.torch import load_file
from transformers import LlamaForCausalLM

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gen_model  # noqa: E402

directory = sys.argv[1]
hf = json.load(open(os.path.join(directory, "config.json")))
model = LlamaForCausalLM.from_pretrained(directory, torch_dtype=torch.float64).eval()
assert type(model).__name__ == "LlamaForCausalLM"

cfg = dict(vocab_size=hf["vocab_size"], d_model=hf["hidden_size"], n_layers=hf["num_hidden_layers"],
           n_heads=hf["num_attention_heads"], n_kv_heads=hf["num_key_value_heads"], d_ff=hf["intermediate_size"],
           mlp={"silu": "swiglu", "gelu": "geglu", "gelu_pytorch_tanh": "geglu_tanh"}[hf["hidden_act"]],
           rope_theta=hf["rope_theta"],
           norm_eps=hf["rms_norm_eps"], tie_embeddings=hf["tie_word_embeddings"])
params = {k: v.to(torch.float64) for k, v in load_file(os.path.join(directory, "model.safetensors")).items()}
tokens = torch.randint(0, cfg["vocab_size"], (2, 65), generator=torch.Generator().manual_seed(0))
with torch.no_grad():
    ours = gen_model.forward_loss(params, cfg, tokens).item()
    logits = model(tokens[:, :-1]).logits
    theirs = torch.nn.functional.cross_entropy(logits.reshape(-1, cfg["vocab_size"]), tokens[:, 1:].reshape(-1)).item()
print(f"reference loss {ours:.12f}, transformers loss {theirs:.12f}, difference {abs(ours - theirs):.2e}")
# transformers builds its RoPE frequencies in float32 even for a float64 model, so the two
# agree to float32 precision of the rotary tables, not to float64.
sys.exit(0 if abs(ours - theirs) <= 1e-5 * max(1.0, abs(ours)) else 1)
