#!/usr/bin/python3
"""Reference values for tests/test_model_reference.cpp: an independent PyTorch
implementation of darkformer's Llama-style causal LM (the Hugging Face Llama
architecture: RMSNorm, RoPE with rotate_half, grouped-query attention, SwiGLU/GeGLU,
tied or untied head), evaluated in float64 on a fixed batch; and of its gemma3 family
(Hugging Face Gemma 3: embedding scaled by sqrt(d_model), QK-norm before RoPE, norms on the
attention and MLP outputs, GeGLU with tanh GELU, sliding-window local layers with their own
RoPE base, head width independent of d_model). Norm weights are the multipliers themselves
(Gemma's 1 + w).

Writes tests/reference/model_<name>_v1.safetensors holding
  - every parameter under its Hugging Face name (float64),
  - "grad.<name>": d loss / d parameter,
  - "tokens": (B, T + 1) int64, "loss": (1,) float64,
and the model config as JSON in the safetensors metadata ("config").

Regenerate with Debian's PyTorch:  /usr/bin/python3 tests/reference/gen_model.py
"""
import json
import math
import os
import struct

import torch

torch.set_default_dtype(torch.float64)
HERE = os.path.dirname(os.path.abspath(__file__))


def rms_norm(x, w, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def rope(x, theta):
    # x: (B, T, H, D); pairs (i, i + D/2) rotate by t * theta^(-2i/D).
    _, t_len, _, d = x.shape
    inv_freq = 1.0 / (theta ** (torch.arange(0, d, 2, dtype=torch.float64) / d))
    angles = torch.arange(t_len, dtype=torch.float64)[:, None] * inv_freq[None, :]
    cos = torch.cat([angles.cos(), angles.cos()], -1)[None, :, None, :]
    sin = torch.cat([angles.sin(), angles.sin()], -1)[None, :, None, :]
    rotated = torch.cat([-x[..., d // 2:], x[..., : d // 2]], -1)
    return x * cos + rotated * sin


def attention(q, k, v, n_rep, window=0):
    # q: (B, T, H, D), k, v: (B, T, Hkv, D); causal softmax attention; window > 0: query t
    # sees keys s with t - s < window only.
    q, k, v = (t.transpose(1, 2) for t in (q, k, v))
    k = k.repeat_interleave(n_rep, dim=1)
    v = v.repeat_interleave(n_rep, dim=1)
    scores = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
    t_len = q.shape[2]
    mask = torch.ones(t_len, t_len, dtype=torch.bool).triu(1)
    if window > 0:
        mask |= torch.ones(t_len, t_len, dtype=torch.bool).tril(-window)
    scores = scores.masked_fill(mask, float("-inf"))
    out = scores.softmax(-1) @ v
    return out.transpose(1, 2).reshape(q.shape[0], t_len, -1)


def head_dim(cfg):
    return cfg.get("head_dim") or cfg["d_model"] // cfg["n_heads"]


def gated_activation(gate, mlp):
    if mlp == "swiglu":
        return torch.nn.functional.silu(gate)
    return torch.nn.functional.gelu(gate, approximate="tanh" if mlp == "geglu_tanh" else "none")


def forward_loss(p, cfg, tokens):
    inputs, targets = tokens[:, :-1], tokens[:, 1:]
    b, t_len = inputs.shape
    h_dim = head_dim(cfg)
    n_rep = cfg["n_heads"] // cfg["n_kv_heads"]
    gemma = cfg.get("family") == "gemma3"
    eps = cfg["norm_eps"]
    x = p["model.embed_tokens.weight"][inputs]
    if gemma:
        x = x * math.sqrt(cfg["d_model"])
    for i in range(cfg["n_layers"]):
        pre = f"model.layers.{i}."
        local = gemma and (i + 1) % cfg["sliding_window_pattern"] != 0
        theta = cfg["rope_local_theta"] if local else cfg["rope_theta"]
        a = rms_norm(x, p[pre + "input_layernorm.weight"], eps)
        q = (a @ p[pre + "self_attn.q_proj.weight"].T).reshape(b, t_len, cfg["n_heads"], h_dim)
        k = (a @ p[pre + "self_attn.k_proj.weight"].T).reshape(b, t_len, cfg["n_kv_heads"], h_dim)
        v = (a @ p[pre + "self_attn.v_proj.weight"].T).reshape(b, t_len, cfg["n_kv_heads"], h_dim)
        if gemma:
            q = rms_norm(q, p[pre + "self_attn.q_norm.weight"], eps)
            k = rms_norm(k, p[pre + "self_attn.k_norm.weight"], eps)
        q, k = rope(q, theta), rope(k, theta)
        o = attention(q, k, v, n_rep, cfg["sliding_window"] if local else 0) @ p[pre + "self_attn.o_proj.weight"].T
        if gemma:
            o = rms_norm(o, p[pre + "post_attention_layernorm.weight"], eps)
        x = x + o
        m = rms_norm(x, p[pre + ("pre_feedforward_layernorm.weight" if gemma else "post_attention_layernorm.weight")], eps)
        gate = m @ p[pre + "mlp.gate_proj.weight"].T
        f = (gated_activation(gate, cfg["mlp"]) * (m @ p[pre + "mlp.up_proj.weight"].T)) @ p[pre + "mlp.down_proj.weight"].T
        if gemma:
            f = rms_norm(f, p[pre + "post_feedforward_layernorm.weight"], eps)
        x = x + f
    x = rms_norm(x, p["model.norm.weight"], eps)
    head = p["model.embed_tokens.weight"] if cfg["tie_embeddings"] else p["lm_head.weight"]
    logits = x @ head.T
    return torch.nn.functional.cross_entropy(logits.reshape(-1, cfg["vocab_size"]), targets.reshape(-1))


def parameter_shapes(cfg):
    d, h_dim, ff = cfg["d_model"], head_dim(cfg), cfg["d_ff"]
    gemma = cfg.get("family") == "gemma3"
    shapes = {"model.embed_tokens.weight": (cfg["vocab_size"], d)}
    for i in range(cfg["n_layers"]):
        pre = f"model.layers.{i}."
        shapes[pre + "input_layernorm.weight"] = (d,)
        shapes[pre + "self_attn.q_proj.weight"] = (cfg["n_heads"] * h_dim, d)
        shapes[pre + "self_attn.k_proj.weight"] = (cfg["n_kv_heads"] * h_dim, d)
        shapes[pre + "self_attn.v_proj.weight"] = (cfg["n_kv_heads"] * h_dim, d)
        shapes[pre + "self_attn.o_proj.weight"] = (d, cfg["n_heads"] * h_dim)
        shapes[pre + "post_attention_layernorm.weight"] = (d,)
        if gemma:
            shapes[pre + "self_attn.q_norm.weight"] = (h_dim,)
            shapes[pre + "self_attn.k_norm.weight"] = (h_dim,)
            shapes[pre + "pre_feedforward_layernorm.weight"] = (d,)
            shapes[pre + "post_feedforward_layernorm.weight"] = (d,)
        shapes[pre + "mlp.gate_proj.weight"] = (ff, d)
        shapes[pre + "mlp.up_proj.weight"] = (ff, d)
        shapes[pre + "mlp.down_proj.weight"] = (d, ff)
    shapes["model.norm.weight"] = (d,)
    if not cfg["tie_embeddings"]:
        shapes["lm_head.weight"] = (cfg["vocab_size"], d)
    return shapes


def write_safetensors(path, tensors, metadata):
    dtypes = {torch.float64: "F64", torch.int64: "I64"}
    header, blobs, offset = {"__metadata__": metadata}, [], 0
    for name in sorted(tensors):
        t = tensors[name].contiguous()
        data = t.numpy().tobytes()
        header[name] = {"dtype": dtypes[t.dtype], "shape": list(t.shape), "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    head = json.dumps(header, separators=(",", ":")).encode()
    head += b" " * (-len(head) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(head)))
        f.write(head)
        for blob in blobs:
            f.write(blob)


def generate(name, cfg, batch, seq_len, seed):
    gen = torch.Generator().manual_seed(seed)
    params = {}
    for pname, shape in parameter_shapes(cfg).items():
        if pname.endswith("norm.weight"):
            params[pname] = 1.0 + 0.1 * torch.randn(shape, generator=gen)  # not all ones: tests the weight
        else:
            params[pname] = 0.3 * torch.randn(shape, generator=gen)
        params[pname].requires_grad_(True)
    tokens = torch.randint(0, cfg["vocab_size"], (batch, seq_len + 1), generator=gen)
    loss = forward_loss(params, cfg, tokens)
    loss.backward()
    tensors = {k: v.detach() for k, v in params.items()}
    tensors.update({"grad." + k: v.grad for k, v in params.items()})
    tensors["tokens"] = tokens
    tensors["loss"] = loss.detach().reshape(1)
    path = os.path.join(HERE, f"model_{name}_v1.safetensors")
    write_safetensors(path, tensors, {"config": json.dumps(cfg, sort_keys=True), "generator": "gen_model.py"})
    print(f"{path}: loss {loss.item():.12f}, {len(params)} parameters, {os.path.getsize(path)} bytes")


BASE = dict(vocab_size=37, d_model=32, n_layers=2, n_heads=4, n_kv_heads=2, d_ff=48, mlp="swiglu",
            rope_theta=10000.0, norm_eps=1e-5, tie_embeddings=False)

if __name__ == "__main__":
    generate("gqa_untied_swiglu", BASE, batch=2, seq_len=11, seed=1)
    generate("tied_geglu", dict(BASE, n_kv_heads=4, mlp="geglu", tie_embeddings=True, rope_theta=500.0), batch=3,
             seq_len=70, seed=2)
    # Layers 0 and 2 local (window 5 of 19 positions, RoPE base 10000), layer 1 global (base
    # 1e6); heads of width 12 with d_model 32; multi-query.
    generate("gemma3", dict(BASE, family="gemma3", n_layers=3, n_kv_heads=1, head_dim=12, mlp="geglu_tanh",
                            tie_embeddings=True, rope_theta=1e6, rope_local_theta=10000.0, sliding_window=5,
                            sliding_window_pattern=2, norm_eps=1e-6), batch=2, seq_len=19, seed=3)
