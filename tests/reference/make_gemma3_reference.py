#!/usr/bin/env python3
"""Reference logits of Gemma 3 270M (Q4_K_M GGUF) for tests/test_gguf_gemma3.cpp.

Two independent implementations of the same model, neither sharing code with darkformer:
  1. numpy, float64: the tensors dequantised by gguf-py (llama.cpp's own Python package) and
     a Gemma 3 forward pass written from the architecture: embedding scaled by sqrt(d_model);
     per block RMSNorm -> attention -> RMSNorm -> residual, RMSNorm -> GeGLU (tanh GELU) ->
     RMSNorm -> residual; q and k RMS-normed over the head dimension before rotate-half RoPE;
     multi-query causal softmax scaled by 1/sqrt(head_dim); local layers (all but every 6th)
     see the last 512 keys with RoPE base 10000, global ones every key with the file's base;
     final RMSNorm and the tied head. llama.cpp's converter stores Gemma's norm weights as the
     multipliers (1 + w), so they multiply as they are. This is the reference the test holds
     darkformer to (1e-3 relative).
  2. llama-cpp-python (llama.cpp's C++ engine) on the same file, for comparison only: it
     quantises activations to 8 bits for the quantised matmuls, so it differs from any float
     evaluation by more than 1e-3; the script prints and records how much, and where the
     argmax agrees.

Usage: pip install gguf numpy llama-cpp-python
       python3 tests/reference/make_gemma3_reference.py [path/to/gemma-3-270m-q4_k_m.gguf]
Writes tests/reference/gemma3_logits.json.
"""
import json
import os
import sys

import numpy as np
from gguf import GGUFReader

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_smollm2_reference import dequantized, field, rms_norm, rope, sampled_positions  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_MODEL = os.path.join(HERE, "..", "..", "cache", "models", "gemma3", "gemma-3-270m-q4_k_m.gguf")
PROMPT = ("The Eiffel Tower is in Paris, the capital of France. The Brandenburg Gate is in Berlin, "
          "the capital of Germany. The Colosseum is in")
PROMPT_TOKENS = 24  # the test prompt: the first 24 tokens (BOS included)
GREEDY_TOKENS = 8
LOCAL_ROPE_BASE = 10000.0  # not in the GGUF; llama.cpp and Hugging Face use 10000 for Gemma 3
GLOBAL_EVERY = 6           # not in the GGUF; every 6th layer is global in Gemma 3


def load(path):
    reader = GGUFReader(path)
    tensors = dequantized(reader)
    hp = {
        "layers": field(reader, "gemma3.block_count"),
        "heads": field(reader, "gemma3.attention.head_count"),
        "kv_heads": field(reader, "gemma3.attention.head_count_kv"),
        "head_dim": field(reader, "gemma3.attention.key_length"),
        "eps": field(reader, "gemma3.attention.layer_norm_rms_epsilon"),
        "theta": field(reader, "gemma3.rope.freq_base"),
        "window": field(reader, "gemma3.attention.sliding_window"),
    }
    return tensors, hp


def gelu_tanh(x):
    return 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x ** 3)))


def forward(tensors, hp, ids):
    emb = tensors["token_embd.weight"]
    x = emb[ids] * np.sqrt(emb.shape[1])
    T = len(ids)
    H, Hkv, d, eps = hp["heads"], hp["kv_heads"], hp["head_dim"], hp["eps"]
    pos = np.arange(T)
    causal = np.where(pos[None, :] <= pos[:, None], 0.0, -np.inf)
    windowed = np.where(pos[:, None] - pos[None, :] < hp["window"], causal, -np.inf)
    for layer in range(hp["layers"]):
        p = f"blk.{layer}."
        is_global = (layer + 1) % GLOBAL_EVERY == 0
        theta = hp["theta"] if is_global else LOCAL_ROPE_BASE
        h = rms_norm(x, tensors[p + "attn_norm.weight"], eps)
        q = (h @ tensors[p + "attn_q.weight"].T).reshape(T, H, d)
        k = (h @ tensors[p + "attn_k.weight"].T).reshape(T, Hkv, d)
        v = (h @ tensors[p + "attn_v.weight"].T).reshape(T, Hkv, d).transpose(1, 0, 2)
        q = rope(rms_norm(q, tensors[p + "attn_q_norm.weight"], eps).transpose(1, 0, 2), theta)
        k = rope(rms_norm(k, tensors[p + "attn_k_norm.weight"], eps).transpose(1, 0, 2), theta)
        k, v = np.repeat(k, H // Hkv, axis=0), np.repeat(v, H // Hkv, axis=0)
        s = q @ k.transpose(0, 2, 1) / np.sqrt(d) + (causal if is_global else windowed)
        a = np.exp(s - s.max(-1, keepdims=True))
        a /= a.sum(-1, keepdims=True)
        o = (a @ v).transpose(1, 0, 2).reshape(T, H * d) @ tensors[p + "attn_output.weight"].T
        x = x + rms_norm(o, tensors[p + "post_attention_norm.weight"], eps)
        h = rms_norm(x, tensors[p + "ffn_norm.weight"], eps)
        g = h @ tensors[p + "ffn_gate.weight"].T
        u = h @ tensors[p + "ffn_up.weight"].T
        m = (gelu_tanh(g) * u) @ tensors[p + "ffn_down.weight"].T
        x = x + rms_norm(m, tensors[p + "post_ffw_norm.weight"], eps)
    x = rms_norm(x, tensors["output_norm.weight"], eps)
    return x @ tensors.get("output.weight", emb).T


def main():
    path = sys.argv[1] if len(sys.argv) > 1 else DEFAULT_MODEL
    from llama_cpp import Llama, __version__ as llama_cpp_version
    import gguf

    llm = Llama(model_path=path, logits_all=True, n_ctx=256, n_threads=2, verbose=False)
    ids = llm.tokenize(PROMPT.encode(), add_bos=True, special=False)
    assert len(ids) >= PROMPT_TOKENS, f"the prompt has {len(ids)} tokens, fewer than {PROMPT_TOKENS}"
    ids = ids[:PROMPT_TOKENS]
    tensors, hp = load(path)
    logits = forward(tensors, hp, np.array(ids))

    llm.eval(ids)
    cpp = np.array(llm.scores[: len(ids)], dtype=np.float64)
    rel = np.abs(cpp - logits).max(axis=1) / np.abs(logits).max(axis=1)
    agree = int((cpp.argmax(1) == logits.argmax(1)).sum())
    print(f"llama.cpp vs numpy float64: max relative difference per position {rel.max():.2e}; "
          f"argmax agrees at {agree}/{len(ids)} positions")

    positions = sampled_positions(logits)
    greedy = list(ids)
    for _ in range(GREEDY_TOKENS):
        greedy.append(int(forward(tensors, hp, np.array(greedy))[-1].argmax()))
    # llama.cpp's own greedy continuation, for the record.
    llm.reset()
    cpp_greedy = list(ids)
    for _ in range(GREEDY_TOKENS):
        llm.reset()
        llm.eval(cpp_greedy)
        cpp_greedy.append(int(np.argmax(llm.scores[len(cpp_greedy) - 1])))
    out = {
        "model": os.path.basename(path),
        "prompt": PROMPT,
        "ids": ids,
        "positions": positions,
        "greedy_ids": greedy[len(ids):],
        "greedy_text": llm.detokenize(greedy[len(ids):]).decode("utf-8", "replace"),
        "reference": f"numpy float64 forward over gguf-py {getattr(gguf, '__version__', '?')} dequantisation",
        "llama_cpp": {"version": llama_cpp_version, "max_relative_difference": float(rel.max()),
                      "argmax": [int(a) for a in cpp.argmax(1)], "argmax_agreement": f"{agree}/{len(ids)}",
                      "greedy_ids": cpp_greedy[len(ids):]},
    }
    with open(os.path.join(HERE, "gemma3_logits.json"), "w") as f:
        json.dump(out, f, indent=1)
    print("prompt ids", ids)
    print("greedy continuation:", repr(out["greedy_text"]), "llama.cpp's:", cpp_greedy[len(ids):])


if __name__ == "__main__":
    main()
