#!/usr/bin/python3
"""The PyTorch side of scripts/bench_train.sh: trains darkformer's Llama-style model the
usual PyTorch way and reports tokens/s and peak memory, for comparison with
darkformer_bench_train on the same model, batch and sequence length.

The architecture follows tests/reference/gen_model.py (our independent PyTorch reference),
written as nn.Modules: token embedding, N pre-norm decoder blocks (RMSNorm -> q/k/v
nn.Linear(bias=False) -> RoPE (rotate_half) -> grouped-query causal softmax attention with
explicit matmul + mask + softmax (torch 1.13 has no scaled_dot_product_attention) -> o_proj
-> residual; RMSNorm -> SwiGLU/GeGLU MLP -> residual), final RMSNorm, LM head tied to the
embedding or not. float32. One step = the work of darkformer's trainer: set the lr,
zero_grad, forward + cross-entropy, backward, loss.item(), clip_grad_norm_ (the global
norm, scaling only when above grad_clip), torch.optim.AdamW.step with the same param
groups (no decay for names matching the no_decay globs).

One thread setting per process (peak RSS is per process): --threads T sets
torch.set_num_threads(T) and OMP_NUM_THREADS=T; --blas-threads N (default T) sets
OPENBLAS_NUM_THREADS=N; --omp-wait-policy and --openblas-coretype set OMP_WAIT_POLICY and
OPENBLAS_CORETYPE (by default unset: OpenBLAS picks kernels for the CPU); all before torch
is imported. Debian's torch does its matrix
products in OpenBLAS's own pthread pool, next to its OpenMP pool, so the two counts are
separate settings and scripts/bench_train.sh tries their combinations. Prints a summary on stderr and one JSON object on stdout with the keys of
darkformer_bench_train's.

  /usr/bin/python3 bench/torch_train.py --model-json "$(build/bench/darkformer_bench_train --print-model)" --threads 2
"""
import argparse
import fnmatch
import json
import math
import os
import resource
import sys
import time


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model-json", required=True,
                   help="the model as darkformer_bench_train --print-model prints it (JSON text, or @FILE)")
    p.add_argument("--threads", type=int, default=1, help="PyTorch intra-op (OpenMP) threads (default 1)")
    p.add_argument("--blas-threads", type=int, default=0,
                   help="OpenBLAS threads (its own pthread pool); default: the same as --threads")
    p.add_argument("--omp-wait-policy", choices=["default", "passive", "active"], default="default",
                   help="OMP_WAIT_POLICY for PyTorch's OpenMP pool (passive: idle OpenMP threads sleep instead of "
                        "spinning while OpenBLAS's threads run; default: the runtime's)")
    p.add_argument("--openblas-coretype", default="auto",
                   help="OpenBLAS kernels: auto (unset OPENBLAS_CORETYPE: OpenBLAS detects the CPU; the default), "
                        "env (keep the environment's value), or a core name such as Haswell, SkylakeX")
    p.add_argument("--steps", type=int, default=20, help="timed steps (default 20)")
    p.add_argument("--warmup", type=int, default=3, help="untimed steps first (default 3)")
    p.add_argument("--foreach", choices=["default", "on", "off"], default="default",
                   help="AdamW foreach implementation (default: PyTorch's choice)")
    return p.parse_args()


ARGS = parse_args()
ARGS.blas_threads = ARGS.blas_threads or ARGS.threads
os.environ["OMP_NUM_THREADS"] = str(ARGS.threads)
os.environ["OPENBLAS_NUM_THREADS"] = str(ARGS.blas_threads)
os.environ["MKL_NUM_THREADS"] = str(ARGS.threads)
if ARGS.omp_wait_policy != "default":
    os.environ["OMP_WAIT_POLICY"] = ARGS.omp_wait_policy.upper()
if ARGS.openblas_coretype == "auto":
    os.environ.pop("OPENBLAS_CORETYPE", None)
elif ARGS.openblas_coretype != "env":
    os.environ["OPENBLAS_CORETYPE"] = ARGS.openblas_coretype

import torch  # noqa: E402  (after the thread variables)
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402


def rss_mb():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0  # KiB on Linux


class RMSNorm(nn.Module):
    def __init__(self, dim, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def rotate_half(x):
    d = x.shape[-1]
    return torch.cat([-x[..., d // 2:], x[..., : d // 2]], -1)


class SelfAttention(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        d, self.h, self.hkv = cfg["d_model"], cfg["n_heads"], cfg["n_kv_heads"]
        self.hd = d // self.h
        self.q_proj = nn.Linear(d, self.h * self.hd, bias=False)
        self.k_proj = nn.Linear(d, self.hkv * self.hd, bias=False)
        self.v_proj = nn.Linear(d, self.hkv * self.hd, bias=False)
        self.o_proj = nn.Linear(self.h * self.hd, d, bias=False)

    def forward(self, x, cos, sin, mask):
        b, t, _ = x.shape
        # (B, H, T, D) as in Hugging Face Llama.
        q = self.q_proj(x).view(b, t, self.h, self.hd).transpose(1, 2)
        k = self.k_proj(x).view(b, t, self.hkv, self.hd).transpose(1, 2)
        v = self.v_proj(x).view(b, t, self.hkv, self.hd).transpose(1, 2)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        if self.hkv != self.h:
            k = k.repeat_interleave(self.h // self.hkv, dim=1)
            v = v.repeat_interleave(self.h // self.hkv, dim=1)
        scores = (q @ k.transpose(-1, -2)) / math.sqrt(self.hd)
        scores = scores.masked_fill(mask, float("-inf"))
        out = scores.softmax(-1) @ v
        return self.o_proj(out.transpose(1, 2).reshape(b, t, self.h * self.hd))


class GatedMlp(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        d, ff = cfg["d_model"], cfg["d_ff"]
        self.gate_proj = nn.Linear(d, ff, bias=False)
        self.up_proj = nn.Linear(d, ff, bias=False)
        self.down_proj = nn.Linear(ff, d, bias=False)
        self.act = F.silu if cfg["mlp"] == "swiglu" else F.gelu

    def forward(self, x):
        return self.down_proj(self.act(self.gate_proj(x)) * self.up_proj(x))


class DecoderBlock(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.input_layernorm = RMSNorm(cfg["d_model"], cfg["norm_eps"])
        self.self_attn = SelfAttention(cfg)
        self.post_attention_layernorm = RMSNorm(cfg["d_model"], cfg["norm_eps"])
        self.mlp = GatedMlp(cfg)

    def forward(self, x, cos, sin, mask):
        x = x + self.self_attn(self.input_layernorm(x), cos, sin, mask)
        return x + self.mlp(self.post_attention_layernorm(x))


class Inner(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.embed_tokens = nn.Embedding(cfg["vocab_size"], cfg["d_model"])
        self.layers = nn.ModuleList([DecoderBlock(cfg) for _ in range(cfg["n_layers"])])
        self.norm = RMSNorm(cfg["d_model"], cfg["norm_eps"])


class CausalLM(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.model = Inner(cfg)
        self.lm_head = None if cfg["tie_embeddings"] else nn.Linear(cfg["d_model"], cfg["vocab_size"], bias=False)
        t, hd = cfg["seq_len"], cfg["d_model"] // cfg["n_heads"]
        inv_freq = 1.0 / (cfg["rope_theta"] ** (torch.arange(0, hd, 2, dtype=torch.float64) / hd))
        angles = torch.arange(t, dtype=torch.float64)[:, None] * inv_freq[None, :]
        emb = torch.cat([angles, angles], -1)
        self.register_buffer("cos", emb.cos().float()[None, None], persistent=False)  # (1, 1, T, D)
        self.register_buffer("sin", emb.sin().float()[None, None], persistent=False)
        self.register_buffer("mask", torch.ones(t, t, dtype=torch.bool).triu(1), persistent=False)
        # Initialisation as darkformer's: N(0, init_std), residual outputs init_std / sqrt(2 L), norms 1.
        std = cfg["init_std"]
        for name, p in self.named_parameters():
            if name.endswith("norm.weight"):
                continue
            s = std / math.sqrt(2 * cfg["n_layers"]) if name.endswith(("o_proj.weight", "down_proj.weight")) else std
            nn.init.normal_(p, 0.0, s)

    def loss(self, tokens):
        inputs, targets = tokens[:, :-1], tokens[:, 1:]
        t = inputs.shape[1]
        cos, sin, mask = self.cos[:, :, :t], self.sin[:, :, :t], self.mask[:t, :t]
        x = self.model.embed_tokens(inputs)
        for layer in self.model.layers:
            x = layer(x, cos, sin, mask)
        x = self.model.norm(x)
        head = self.lm_head.weight if self.lm_head is not None else self.model.embed_tokens.weight
        logits = x @ head.T
        return F.cross_entropy(logits.reshape(-1, self.cfg["vocab_size"]), targets.reshape(-1))


def openblas_info():
    """(core name, threads) of the OpenBLAS this process loaded, or ("none", 0)."""
    import ctypes
    with open("/proc/self/maps") as f:
        libs = sorted({line.split()[-1] for line in f if "libopenblas" in line})
    if not libs:
        return "none", 0
    lib = ctypes.CDLL(libs[0])  # already loaded: the same handle
    lib.openblas_get_corename.restype = ctypes.c_char_p
    return lib.openblas_get_corename().decode(), lib.openblas_get_num_threads()


def median(v):
    s = sorted(v)
    n = len(s)
    return s[n // 2] if n % 2 else 0.5 * (s[n // 2 - 1] + s[n // 2])


def main():
    text = ARGS.model_json
    if text.startswith("@"):
        with open(text[1:]) as f:
            text = f.read()
    cfg = json.loads(text)
    if cfg.get("attention", "softmax") != "softmax" or cfg.get("optimizer", "adamw") != "adamw":
        sys.exit("torch_train.py: only softmax attention with AdamW is implemented")
    torch.set_num_threads(ARGS.threads)
    torch.manual_seed(cfg["seed"])
    base_rss = rss_mb()

    model = CausalLM(cfg)
    model.train()
    decay, no_decay = [], []
    for name, p in model.named_parameters():
        (no_decay if any(fnmatch.fnmatchcase(name, pat) for pat in cfg["no_decay"]) else decay).append(p)
    groups = [{"params": decay, "weight_decay": cfg["weight_decay"]}, {"params": no_decay, "weight_decay": 0.0}]
    kw = {} if ARGS.foreach == "default" else {"foreach": ARGS.foreach == "on"}
    opt = torch.optim.AdamW(groups, lr=cfg["lr"], betas=tuple(cfg["betas"]), eps=cfg["eps"], **kw)
    params = [p for p in model.parameters()]
    b, t, v, accum = cfg["batch_size"], cfg["seq_len"], cfg["vocab_size"], cfg.get("grad_accum", 1)

    gen = torch.Generator().manual_seed(cfg["seed"] + 12345)
    step_s, fwd_s, bwd_s, norm_s, opt_s = [], [], [], [], []
    first_loss = last_loss = 0.0
    for step in range(ARGS.warmup + ARGS.steps):
        batches = [torch.randint(0, v, (b, t + 1), generator=gen) for _ in range(accum)]
        t0 = time.perf_counter()
        for g in opt.param_groups:
            g["lr"] = cfg["lr"]  # darkformer sets the scheduled lr every step; a constant here
        opt.zero_grad(set_to_none=True)
        loss_value, fwd, bwd = 0.0, 0.0, 0.0
        for tokens in batches:
            f0 = time.perf_counter()
            loss = model.loss(tokens)
            if accum > 1:
                loss = loss / accum
            f1 = time.perf_counter()
            loss.backward()
            loss_value += loss.item()
            f2 = time.perf_counter()
            fwd += f1 - f0
            bwd += f2 - f1
        n0 = time.perf_counter()
        if cfg["grad_clip"] > 0:
            torch.nn.utils.clip_grad_norm_(params, cfg["grad_clip"])
        else:
            torch.linalg.vector_norm(torch.stack([p.grad.norm() for p in params]))
        o0 = time.perf_counter()
        opt.step()
        t1 = time.perf_counter()
        if step == 0:
            first_loss = loss_value
        last_loss = loss_value
        if step >= ARGS.warmup:
            step_s.append(t1 - t0)
            fwd_s.append(fwd)
            bwd_s.append(bwd)
            norm_s.append(o0 - n0)
            opt_s.append(t1 - o0)

    med = median(step_s)
    blas_core, blas_threads = openblas_info()
    out = {
        "side": "pytorch",
        "threads": ARGS.threads,
        "blas_threads": blas_threads,
        "blas_core": blas_core,
        "omp_wait_policy": ARGS.omp_wait_policy,
        "steps": ARGS.steps,
        "warmup": ARGS.warmup,
        "median_step_ms": med * 1e3,
        "min_step_ms": min(step_s) * 1e3,
        "max_step_ms": max(step_s) * 1e3,
        "tokens_per_s": b * t * accum / med,
        "peak_rss_mb": rss_mb(),
        "base_rss_mb": base_rss,
        "parameters": sum(p.numel() for p in params),
        "first_loss": first_loss,
        "last_loss": last_loss,
        "phases_ms": {"forward": median(fwd_s) * 1e3, "backward": median(bwd_s) * 1e3,
                      "grad_norm_clip": median(norm_s) * 1e3, "optimizer": median(opt_s) * 1e3},
        "torch": torch.__version__,
        "foreach": ARGS.foreach,
    }
    print(f"pytorch {torch.__version__}: {out['parameters']} params, batch {b} x seq {t}, {ARGS.threads} threads"
          f" (OpenBLAS {blas_core}, {blas_threads} threads)\n"
          f"  step median {med * 1e3:.1f} ms [{out['min_step_ms']:.1f}..{out['max_step_ms']:.1f}] over {ARGS.steps} steps"
          f" -> {out['tokens_per_s']:.0f} tokens/s; loss {first_loss:.4f} -> {last_loss:.4f}\n"
          f"  phases (median ms): forward {out['phases_ms']['forward']:.1f} | backward {out['phases_ms']['backward']:.1f}"
          f" | grad norm+clip {out['phases_ms']['grad_norm_clip']:.2f} | optimizer {out['phases_ms']['optimizer']:.2f}\n"
          f"  peak RSS {out['peak_rss_mb']:.1f} MB ({base_rss:.1f} MB before the model)", file=sys.stderr)
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
