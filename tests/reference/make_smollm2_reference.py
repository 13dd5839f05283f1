#!/usr/bin/env python3
"""Reference logits of SmolLM2-135M-Instruct (Q4_1 GGUF) for tests/test_gguf_model.cpp.

Two independent implementations of the same model, neither sharing code with darkformer:
  1. numpy, float64: the tensors dequantised by gguf-py (llama.cpp's own Python package),
     the q/k rows un-permuted as transformers' GGUF loader does, and a from-the-paper Llama
     forward pass (RMSNorm, rotate-half RoPE, grouped-query causal softmax, SwiGLU, tied head).
     This is the reference the test holds darkformer to (1e-3 relative).
  2. llama-cpp-python (llama.cpp's C++ engine) on the same file, recorded for comparison only:
     on the CPU it multiplies Q4_1 weights by activations quantised to 8 bits, so it differs
     from any float evaluation by more than 1e-3; the script prints how much.

Usage: pip install gguf numpy llama-cpp-python
       python3 tests/reference/make_smollm2_reference.py [path/to/SmolLM2-135M-Instruct.Q4_1.gguf]
Writes tests/reference/smollm2_logits.json.
"""
import json
import os
import sys

import numpy as np
from gguf import GGUFReader
from gguf.quants import dequantize

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_MODEL = os.path.join(HERE, "..", "..", "cache", "models", "smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf")
PROMPT = "The capital of France is Paris. The capital of Germany is"
SAMPLED_COLUMNS = 64  # per position, besides the top 16


def field(reader, key):
    return reader.fields[key].contents()


def dequantized(reader):
    """Every tensor of the file, dequantised by gguf-py, as float64 in row-major shape."""
    tensors = {}
    for t in reader.tensors:
        shape = [int(d) for d in reversed(t.shape)]  # GGUF dims are fastest-first
        tensors[t.name] = dequantize(t.data, t.tensor_type).reshape(shape).astype(np.float64)
    return tensors


def load(path):
    reader = GGUFReader(path)
    tensors = dequantized(reader)
    hp = {
        "layers": field(reader, "llama.block_count"),
        "heads": field(reader, "llama.attention.head_count"),
        "kv_heads": field(reader, "llama.attention.head_count_kv"),
        "eps": field(reader, "llama.attention.layer_norm_rms_epsilon"),
        "theta": field(reader, "llama.rope.freq_base"),
    }
    return tensors, hp


def unpermute(w, heads):
    # The converter applied w.reshape(heads, 2, d/2, in).swapaxes(1, 2); undo it.
    rows, cols = w.shape
    return w.reshape(heads, rows // heads // 2, 2, cols).swapaxes(1, 2).reshape(rows, cols)


def rms_norm(x, w, eps):
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w


def rope(x, theta):  # x: (heads, T, d), rotate-half convention
    heads, T, d = x.shape
    inv = theta ** (-np.arange(0, d, 2) / d)
    ang = np.arange(T)[:, None] * inv[None, :]
    cos, sin = np.cos(np.concatenate([ang, ang], -1)), np.sin(np.concatenate([ang, ang], -1))
    rotated = np.concatenate([-x[..., d // 2:], x[..., : d // 2]], -1)
    return x * cos + rotated * sin


def forward(tensors, hp, ids):
    x = tensors["token_embd.weight"][ids]
    T = len(ids)
    H, Hkv = hp["heads"], hp["kv_heads"]
    d = x.shape[1] // H
    mask = np.triu(np.full((T, T), -np.inf), 1)
    for layer in range(hp["layers"]):
        p = f"blk.{layer}."
        h = rms_norm(x, tensors[p + "attn_norm.weight"], hp["eps"])
        q = h @ unpermute(tensors[p + "attn_q.weight"], H).T
        k = h @ unpermute(tensors[p + "attn_k.weight"], Hkv).T
        v = h @ tensors[p + "attn_v.weight"].T
        q = rope(q.reshape(T, H, d).transpose(1, 0, 2), hp["theta"])
        k = rope(k.reshape(T, Hkv, d).transpose(1, 0, 2), hp["theta"])
        v = v.reshape(T, Hkv, d).transpose(1, 0, 2)
        k, v = np.repeat(k, H // Hkv, axis=0), np.repeat(v, H // Hkv, axis=0)
        s = q @ k.transpose(0, 2, 1) / np.sqrt(d) + mask
        a = np.exp(s - s.max(-1, keepdims=True))
        a /= a.sum(-1, keepdims=True)
        o = (a @ v).transpose(1, 0, 2).reshape(T, H * d)
        x = x + o @ tensors[p + "attn_output.weight"].T
        h = rms_norm(x, tensors[p + "ffn_norm.weight"], hp["eps"])
        g = h @ tensors[p + "ffn_gate.weight"].T
        u = h @ tensors[p + "ffn_up.weight"].T
        x = x + (g / (1 + np.exp(-g)) * u) @ tensors[p + "ffn_down.weight"].T
    x = rms_norm(x, tensors["output_norm.weight"], hp["eps"])
    head = tensors.get("output.weight", tensors["token_embd.weight"])
    return x @ head.T


def sampled_positions(logits):
    """Per position: the top 16 and SAMPLED_COLUMNS random columns (seeded) of the logits, the
    largest magnitude and the argmax: what the C++ test compares."""
    rng = np.random.default_rng(0)
    positions = []
    for row in logits:
        cols = sorted(set(np.argsort(-row)[:16].tolist()) | set(rng.choice(row.size, SAMPLED_COLUMNS, replace=False).tolist()))
        positions.append({"columns": cols, "logits": [float(row[c]) for c in cols],
                          "max_abs": float(np.abs(row).max()), "argmax": int(row.argmax())})
    return positions


def main():
    path = sys.argv[1] if len(sys.argv) > 1 else DEFAULT_MODEL
    from llama_cpp import Llama, __version__ as llama_cpp_version
    import gguf

    llm = Llama(model_path=path, logits_all=True, n_ctx=256, n_threads=2, verbose=False)
    ids = llm.tokenize(PROMPT.encode(), add_bos=False, special=True)
    tensors, hp = load(path)
    logits = forward(tensors, hp, np.array(ids))

    llm.eval(ids)
    cpp = np.array(llm.scores[: len(ids)], dtype=np.float64)
    rel = np.abs(cpp - logits).max(axis=1) / np.abs(logits).max(axis=1)
    print(f"llama.cpp vs numpy float64: max relative difference per position {rel.max():.2e}; "
          f"argmax agrees at {int((cpp.argmax(1) == logits.argmax(1)).sum())}/{len(ids)} positions")

    positions = sampled_positions(logits)
    # Greedy continuation by the float64 reference, for the coherence check.
    greedy = list(ids)
    for _ in range(8):
        greedy.append(int(forward(tensors, hp, np.array(greedy))[-1].argmax()))
    out = {
        "model": os.path.basename(path),
        "prompt": PROMPT,
        "ids": ids,
        "positions": positions,
        "greedy_ids": greedy[len(ids):],
        "greedy_text": llm.detokenize(greedy[len(ids):]).decode("utf-8", "replace"),
        "reference": f"numpy float64 forward over gguf-py {getattr(gguf, '__version__', '?')} dequantisation",
        "llama_cpp": {"version": llama_cpp_version, "max_relative_difference": float(rel.max()),
                      "argmax": [int(a) for a in cpp.argmax(1)]},
    }
    with open(os.path.join(HERE, "smollm2_logits.json"), "w") as f:
        json.dump(out, f, indent=1)
    print("prompt ids", ids)
    print("greedy continuation:", repr(out["greedy_text"]))


if __name__ == "__main__":
    main()
