#!/usr/bin/python3
"""The PyTorch side of scripts/bench_train.sh: trains darkformer's Llama-style model the
usual PyTorch way and reports tokens/s and peak memory, for comparison with
darkformer_bench_train on the same model, batch and sequence length.

The architecture follows tests/reference/gen_model.py (our independent PyTorch reference),
written as nn.Modules: token embedding, N pre-norm decoder blocks (RMSNorm -> q/k/v
nn.Linear(bias=False) -> RoPE (rotate_half) -> grouped-query causal softmax attention ->
o_proj -> residual; RMSNorm -> SwiGLU/GeGLU MLP -> residual), final RMSNorm, LM head tied to
the embedding or not. float32. One step = the work of darkformer's trainer: set the lr,
zero_grad, forward + cross-entropy, backward, loss.item(), clip_grad_norm_ (the global
norm, scaling only when above grad_clip), torch.optim.AdamW.step with the same param
groups (no decay for names matching the no_decay globs).

It runs on Debian's torch 1.13 and on current PyPI torch, each at its best by default:
  * --attention auto: torch.nn.functional.scaled_dot_product_attention(is_causal=True)
    where it exists (torch >= 2.0; grouped-query heads through enable_gqa where supported,
    else k/v expanded), else explicit matmul + mask + softmax (1.13);
  * --optimizer auto: AdamW(fused=True) when this torch has a fused CPU kernel (probed on
    a dummy parameter), else foreach=True; the JSON says which ran;
  * --compile: torch.compile of the loss function (forward + cross-entropy; backward through
    AOTAutograd); the first warm-up step absorbs the compilation, reported as compile_s
    (first step - median step) and never timed. --cold-compile disables inductor's caches
    so compile_s is a cold compile's.
Peak memory: peak_rss_mb is the whole process's (ru_maxrss, compilation included);
timed_peak_rss_mb is the peak over the timed steps only (VmHWM reset through
/proc/self/clear_refs after the warm-up), so a compiler's transient memory can be told apart.

One thread setting per process (peak RSS is per process): --threads T sets
torch.set_num_threads(T) and OMP_NUM_THREADS=T; --blas-threads N (default T) sets
OPENBLAS_NUM_THREADS=N; --omp-wait-policy and --openblas-coretype set OMP_WAIT_POLICY and
OPENBLAS_CORETYPE (by default unset: OpenBLAS picks kernels for the CPU); all before torch
is imported. Debian's torch does its matrix products in OpenBLAS's own pthread pool, next
to its OpenMP pool, so the two counts are separate settings and scripts/bench_train.sh tries
their combinations; PyPI's torch uses oneDNN / MKL in its OpenMP pool (no OpenBLAS), so only
--threads matters there. Prints a summary on stderr and one JSON object on stdout with the
keys of darkformer_bench_train's, plus torch, torch_build (debian / pypi / other), mode
(eager / compile), attention_impl and optimizer_impl.

  /usr/bin/python3 bench/torch_train.py --model-json "$(build/bench/darkformer_bench_train --print-model)" --threads 2
  cache/venv-torch/bin/python bench/torch_train.py --model-json ... --threads 2 --compile
"""
import argparse
import fnmatch
import json
import math
import os
import re
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
    p.add_argument("--attention", choices=["auto", "sdpa", "matmul"], default="auto",
                   help="auto (default): scaled_dot_product_attention where this torch has it, else matmul; "
                        "matmul: explicit q k^T + mask + softmax + @ v")
    p.add_argument("--optimizer", choices=["auto", "fused", "foreach", "for-loop", "default"], default="auto",
                   help="AdamW implementation: auto (default: fused when supported on the CPU, else foreach), "
                        "fused, foreach, for-loop, or default (PyTorch's own choice)")
    p.add_argument("--compile", action="store_true",
                   help="torch.compile the loss function (torch >= 2.0); warm-up absorbs the compile time")
    p.add_argument("--compile-mode", default="default",
                   help="torch.compile mode (default, reduce-overhead, max-autotune, ...)")
    p.add_argument("--cold-compile", action="store_true",
                   help="disable inductor's caches (TORCHINDUCTOR_FORCE_DISABLE_CACHES=1): compile_s is a cold compile")
    a = p.parse_args()
    if a.compile and a.warmup < 1:
        p.error("--compile needs --warmup >= 1 (the first step compiles)")
    return a


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
if ARGS.cold_compile:
    os.environ["TORCHINDUCTOR_FORCE_DISABLE_CACHES"] = "1"
# A CPU benchmark: the PyPI wheel's CUDA libraries must not look for (or initialise) a GPU.
os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")

import torch  # noqa: E402  (after the thread variables)
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402


def rss_mb():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0  # KiB on Linux


def hwm_mb():
    """VmHWM (peak RSS since the last reset_hwm) in MB, or None."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024.0
    except OSError:
        pass
    return None


CUDA_LIB = re.compile(r"lib(cuda|cublas|cudnn|cufft|curand|cusolver|cusparse|cupti|cufile|nvrtc|nvJitLink|nvToolsExt|"
                      r"nvshmem|nvjpeg|nvidia|nccl|torch_cuda|c10_cuda|caffe2_nvrtc)")


def cuda_lib_rss_mb():
    """Resident MB of the CUDA libraries this process mapped (the PyPI wheel loads them even
    for CPU use: ~250 MB that a CPU-only build would not have), from /proc/self/smaps."""
    total, current = 0, ""
    try:
        with open("/proc/self/smaps") as f:
            for line in f:
                parts = line.split()
                if parts and "-" in parts[0] and not parts[0].endswith(":"):
                    current = os.path.basename(parts[5]) if len(parts) >= 6 else ""
                elif parts and parts[0] == "Rss:" and CUDA_LIB.match(current):
                    total += int(parts[1])
    except OSError:
        return None
    return total / 1024.0


def reset_hwm():
    """Resets VmHWM to the current RSS (Linux >= 4.0); False when not allowed."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


SDPA = getattr(F, "scaled_dot_product_attention", None)


def sdpa_has_gqa():
    if SDPA is None:
        return False
    try:
        x, kv = torch.zeros(1, 2, 2, 8), torch.zeros(1, 1, 2, 8)
        SDPA(x, kv, kv, is_causal=True, enable_gqa=True)
        return True
    except (TypeError, RuntimeError):
        return False


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
    def __init__(self, cfg, impl):
        super().__init__()
        self.impl = impl  # "sdpa", "sdpa-gqa" or "matmul"
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
        if self.impl == "sdpa-gqa" and self.hkv != self.h:
            out = SDPA(q, k, v, is_causal=True, enable_gqa=True)
        else:
            if self.hkv != self.h:
                k = k.repeat_interleave(self.h // self.hkv, dim=1)
                v = v.repeat_interleave(self.h // self.hkv, dim=1)
            if self.impl.startswith("sdpa"):
                out = SDPA(q, k, v, is_causal=True)
            else:
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
        # darkformer's MLP kinds: swiglu (SiLU gate), geglu (exact GELU), geglu_tanh (GELU's tanh form).
        self.act = {"swiglu": F.silu, "geglu": F.gelu,
                    "geglu_tanh": lambda x: F.gelu(x, approximate="tanh")}[cfg["mlp"]]

    def forward(self, x):
        return self.down_proj(self.act(self.gate_proj(x)) * self.up_proj(x))


class DecoderBlock(nn.Module):
    def __init__(self, cfg, attention_impl):
        super().__init__()
        self.input_layernorm = RMSNorm(cfg["d_model"], cfg["norm_eps"])
        self.self_attn = SelfAttention(cfg, attention_impl)
        self.post_attention_layernorm = RMSNorm(cfg["d_model"], cfg["norm_eps"])
        self.mlp = GatedMlp(cfg)

    def forward(self, x, cos, sin, mask):
        x = x + self.self_attn(self.input_layernorm(x), cos, sin, mask)
        return x + self.mlp(self.post_attention_layernorm(x))


class Inner(nn.Module):
    def __init__(self, cfg, attention_impl):
        super().__init__()
        self.embed_tokens = nn.Embedding(cfg["vocab_size"], cfg["d_model"])
        self.layers = nn.ModuleList([DecoderBlock(cfg, attention_impl) for _ in range(cfg["n_layers"])])
        self.norm = RMSNorm(cfg["d_model"], cfg["norm_eps"])


class CausalLM(nn.Module):
    def __init__(self, cfg, attention_impl):
        super().__init__()
        self.cfg = cfg
        self.model = Inner(cfg, attention_impl)
        self.lm_head = None if cfg["tie_embeddings"] else nn.Linear(cfg["d_model"], cfg["vocab_size"], bias=False)
        t, hd = cfg["seq_len"], cfg["d_model"] // cfg["n_heads"]
        inv_freq = 1.0 / (cfg["rope_theta"] ** (torch.arange(0, hd, 2, dtype=torch.float64) / hd))
        angles = torch.arange(t, dtype=torch.float64)[:, None] * inv_freq[None, :]
        emb = torch.cat([angles, angles], -1)
        self.register_buffer("cos", emb.cos().float()[None, None], persistent=False)  # (1, 1, T, D)
        self.register_buffer("sin", emb.sin().float()[None, None], persistent=False)
        if attention_impl == "matmul":  # SDPA's is_causal needs no mask
            self.register_buffer("mask", torch.ones(t, t, dtype=torch.bool).triu(1), persistent=False)
        else:
            self.mask = None
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
        cos, sin = self.cos[:, :, :t], self.sin[:, :, :t]
        mask = None if self.mask is None else self.mask[:t, :t]
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


def torch_build():
    """Where this torch came from: debian (python3-torch), pypi (pip, a virtual environment) or other."""
    path = os.path.realpath(torch.__file__)
    if path.startswith("/usr/lib/python3/dist-packages/"):
        return "debian"
    return "pypi" if "site-packages" in path else "other"


def make_adamw(groups, cfg):
    """AdamW as --optimizer asks; returns (optimizer, the implementation that runs)."""
    common = dict(lr=cfg["lr"], betas=tuple(cfg["betas"]), eps=cfg["eps"])

    def works(**kw):
        # Some versions accept fused=True and fail only at the first step on the CPU: probe both.
        try:
            p = nn.Parameter(torch.zeros(4))
            p.grad = torch.ones(4)
            torch.optim.AdamW([p], **common, **kw).step()
            return True
        except (TypeError, RuntimeError, ValueError):
            return False

    choice = ARGS.optimizer
    if choice == "auto":
        choice = "fused" if works(fused=True) else "foreach" if works(foreach=True) else "for-loop"
    kw = {"fused": {"fused": True}, "foreach": {"foreach": True}, "for-loop": {"foreach": False}, "default": {}}[choice]
    if kw and not works(**kw):
        sys.exit(f"torch_train.py: AdamW {choice} does not run with torch {torch.__version__} on the CPU")
    opt = torch.optim.AdamW(groups, **common, **kw)
    if choice == "default":
        # What PyTorch picks for CPU tensors: neither fused nor foreach (foreach defaults on for CUDA only).
        d = opt.defaults
        choice = "default: " + ("fused" if d.get("fused") else "foreach" if d.get("foreach") else "for-loop")
    return opt, choice


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

    attention = ARGS.attention
    if attention == "auto":
        attention = "sdpa" if SDPA is not None else "matmul"
    if attention == "sdpa":
        if SDPA is None:
            sys.exit(f"torch_train.py: torch {torch.__version__} has no scaled_dot_product_attention")
        if cfg["n_kv_heads"] != cfg["n_heads"] and sdpa_has_gqa():
            attention = "sdpa-gqa"  # SDPA reads the shared k/v heads itself
    if ARGS.compile and not hasattr(torch, "compile"):
        sys.exit(f"torch_train.py: torch {torch.__version__} has no torch.compile")
    model = CausalLM(cfg, attention)
    model.train()
    decay, no_decay = [], []
    for name, p in model.named_parameters():
        (no_decay if any(fnmatch.fnmatchcase(name, pat) for pat in cfg["no_decay"]) else decay).append(p)
    groups = [{"params": decay, "weight_decay": cfg["weight_decay"]}, {"params": no_decay, "weight_decay": 0.0}]
    opt, optimizer_impl = make_adamw(groups, cfg)
    params = [p for p in model.parameters()]
    b, t, v, accum = cfg["batch_size"], cfg["seq_len"], cfg["vocab_size"], cfg.get("grad_accum", 1)
    # The loss function (forward + cross-entropy) is what compiles; AOTAutograd compiles its
    # backward at the first backward. The optimizer stays eager: fused AdamW is one kernel already.
    loss_fn = model.loss
    if ARGS.compile:
        loss_fn = torch.compile(model.loss, mode=None if ARGS.compile_mode == "default" else ARGS.compile_mode)

    gen = torch.Generator().manual_seed(cfg["seed"] + 12345)
    step_s, fwd_s, bwd_s, norm_s, opt_s, warm_s = [], [], [], [], [], []
    first_loss = last_loss = 0.0
    hwm_reset = False
    for step in range(ARGS.warmup + ARGS.steps):
        if step == ARGS.warmup:
            # Peak over the timed steps from here: a compiler's transient memory stays out of it.
            hwm_reset = reset_hwm()
        batches = [torch.randint(0, v, (b, t + 1), generator=gen) for _ in range(accum)]
        t0 = time.perf_counter()
        for g in opt.param_groups:
            g["lr"] = cfg["lr"]  # darkformer sets the scheduled lr every step; a constant here
        opt.zero_grad(set_to_none=True)
        loss_value, fwd, bwd = 0.0, 0.0, 0.0
        for tokens in batches:
            f0 = time.perf_counter()
            loss = loss_fn(tokens)
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
        else:
            warm_s.append(t1 - t0)

    med = median(step_s)
    blas_core, blas_threads = openblas_info()
    mode = "compile" if ARGS.compile else "eager"
    out = {
        "side": "pytorch",
        "torch": torch.__version__,
        "torch_build": torch_build(),
        "mode": mode,
        "compile_mode": ARGS.compile_mode if ARGS.compile else None,
        "attention_impl": attention,
        "optimizer_impl": optimizer_impl,
        "threads": ARGS.threads,
        "blas_threads": blas_threads,
        "blas_core": blas_core,
        "omp_wait_policy": ARGS.omp_wait_policy,
        "steps": ARGS.steps,
        "warmup": ARGS.warmup,
        "median_step_ms": med * 1e3,
        "min_step_ms": min(step_s) * 1e3,
        "max_step_ms": max(step_s) * 1e3,
        "warmup_step_ms": [x * 1e3 for x in warm_s],
        "compile_s": (warm_s[0] - med) if ARGS.compile and warm_s else None,
        "cold_compile": ARGS.cold_compile,
        "tokens_per_s": b * t * accum / med,
        "peak_rss_mb": rss_mb(),
        "timed_peak_rss_mb": hwm_mb() if hwm_reset else None,
        "cuda_lib_rss_mb": cuda_lib_rss_mb(),
        "base_rss_mb": base_rss,
        "parameters": sum(p.numel() for p in params),
        "first_loss": first_loss,
        "last_loss": last_loss,
        "phases_ms": {"forward": median(fwd_s) * 1e3, "backward": median(bwd_s) * 1e3,
                      "grad_norm_clip": median(norm_s) * 1e3, "optimizer": median(opt_s) * 1e3},
        "python": sys.executable,
    }
    blas = f"OpenBLAS {blas_core}, {blas_threads} threads" if blas_core != "none" else "no OpenBLAS"
    compile_note = ""
    if ARGS.compile:
        compile_note = (f"\n  torch.compile ({ARGS.compile_mode}{', cold' if ARGS.cold_compile else ''}): "
                        f"first step {warm_s[0]:.1f} s -> compile ~{out['compile_s']:.1f} s")
    timed_peak = f", {out['timed_peak_rss_mb']:.1f} MB during the timed steps" if out["timed_peak_rss_mb"] else ""
    if out["cuda_lib_rss_mb"]:
        timed_peak += f"; CUDA libraries resident {out['cuda_lib_rss_mb']:.1f} MB"
    print(f"pytorch {torch.__version__} ({out['torch_build']}) {mode}: {out['parameters']} params, batch {b} x seq {t},"
          f" {ARGS.threads} threads ({blas}); attention {attention}, AdamW {optimizer_impl}{compile_note}\n"
          f"  step median {med * 1e3:.1f} ms [{out['min_step_ms']:.1f}..{out['max_step_ms']:.1f}] over {ARGS.steps} steps"
          f" -> {out['tokens_per_s']:.0f} tokens/s; loss {first_loss:.4f} -> {last_loss:.4f}\n"
          f"  phases (median ms): forward {out['phases_ms']['forward']:.1f} | backward {out['phases_ms']['backward']:.1f}"
          f" | grad norm+clip {out['phases_ms']['grad_norm_clip']:.2f} | optimizer {out['phases_ms']['optimizer']:.2f}\n"
          f"  peak RSS {out['peak_rss_mb']:.1f} MB ({base_rss:.1f} MB before the model{timed_peak})", file=sys.stderr)
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
