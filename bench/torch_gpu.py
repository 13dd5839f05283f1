#!/usr/bin/env python3
"""The PyTorch side of scripts/bench_gpu.sh, on the same GPU in the same run as darkformer:

  train      the Llama-style model of darkformer_bench_train --print-model (token embedding,
             pre-norm blocks of RMSNorm -> q/k/v -> RoPE (rotate_half) -> causal grouped-query
             scaled_dot_product_attention -> o_proj, RMSNorm -> SwiGLU / GeGLU MLP, final norm,
             LM head tied or not), one step = forward + cross entropy, backward, clip_grad_norm_,
             fused AdamW (norms and embeddings without weight decay, as darkformer's no_decay),
             bf16 autocast when the model's precision is bf16; --compile wraps the model in
             torch.compile. Reports the median step over --steps after --warmup.
  attention  scaled_dot_product_attention(is_causal=True) forward + backward on (B, H, L, D)
             with B = max(1, tokens / L), as darkformer_bench_gpu_attention times its kernels,
             with the same FLOP count (causal forward 2 B H L^2 D, backward 2.5 times that).

Prints one JSON object per line on stdout (progress on stderr); the keys match the darkformer
side's. Needs torch >= 2.0 with CUDA; without a GPU it says so and exits 1.

--device cpu (either mode) runs the same code on the CPU, as a smoke test that needs no GPU
(tests/torch_gpu_smoke.sh, with a tiny model and tiny lengths): bf16 autocast is then torch's
CPU autocast, AdamW is fused where this torch has a fused CPU kernel (else foreach), and the
peak memory values (peak_mem_mib, peak_mib) are null. Its timings mean nothing for the GPU.
"""
import argparse
import fnmatch
import json
import os
import statistics
import sys
import time


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--device", choices=["cuda", "cpu"], default="cuda",
                        help="cuda (default; exits 1 without a GPU) or cpu (a smoke test: tiny sizes only)")
    sub = p.add_subparsers(dest="mode", required=True)
    t = sub.add_parser("train", parents=[common])
    t.add_argument("--model-json", required=True, help="darkformer_bench_train --print-model output (or @FILE)")
    t.add_argument("--steps", type=int, default=20)
    t.add_argument("--warmup", type=int, default=5)
    t.add_argument("--compile", action="store_true", help="torch.compile the model")
    a = sub.add_parser("attention", parents=[common])
    a.add_argument("--lens", default="1024,2048,4096,8192,16384,32768,65536,131072")
    a.add_argument("--dims", default="64,128")
    a.add_argument("--tokens", type=int, default=131072)
    a.add_argument("--heads", type=int, default=8)
    a.add_argument("--dtype", choices=["bf16", "f32"], default="bf16")
    a.add_argument("--warmup", type=int, default=2)
    a.add_argument("--reps", type=int, default=5)
    a.add_argument("--rounds", type=int, default=3)
    args = p.parse_args()
    if args.mode == "train" and (args.steps < 1 or args.warmup < 0):
        p.error("train needs --steps >= 1 and --warmup >= 0")
    if args.mode == "attention" and (args.reps < 1 or args.rounds < 1 or args.warmup < 0):
        p.error("attention needs --reps >= 1, --rounds >= 1 and --warmup >= 0")
    return args


ARGS = parse_args()
if ARGS.device == "cpu":
    # A CPU run: the PyPI wheel's CUDA libraries must not look for (or initialise) a GPU.
    os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

if ARGS.device == "cuda" and not torch.cuda.is_available():
    print("torch_gpu.py: no GPU (torch.cuda.is_available() is False)", file=sys.stderr)
    sys.exit(1)
if not hasattr(F, "scaled_dot_product_attention"):
    print(f"torch_gpu.py: torch {torch.__version__} has no scaled_dot_product_attention (needs torch >= 2.0)",
          file=sys.stderr)
    sys.exit(1)
DEV = torch.device(ARGS.device)
CUDA = DEV.type == "cuda"


def sync_time():
    if CUDA:
        torch.cuda.synchronize()
    return time.perf_counter()


def sdpa_has_gqa():
    """Whether scaled_dot_product_attention takes enable_gqa (torch >= 2.5)."""
    try:
        x, kv = torch.zeros(1, 2, 2, 8), torch.zeros(1, 1, 2, 8)
        F.scaled_dot_product_attention(x, kv, kv, is_causal=True, enable_gqa=True)
        return True
    except (TypeError, RuntimeError):
        return False


# ---------------------------------------------------------------- attention

def bench_attention():
    dtype = torch.bfloat16 if ARGS.dtype == "bf16" else torch.float32
    for d in [int(x) for x in ARGS.dims.split(",")]:
        for length in [int(x) for x in ARGS.lens.split(",")]:
            b, h = max(1, ARGS.tokens // length), ARGS.heads
            q, k, v = (torch.randn(b, h, length, d, device=DEV, dtype=dtype, requires_grad=True) for _ in range(3))
            dout = torch.randn(b, h, length, d, device=DEV, dtype=dtype)

            def call():
                out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
                out.backward(dout)
                q.grad = k.grad = v.grad = None

            try:
                for _ in range(ARGS.warmup):
                    call()
                peak = None  # the caching allocator's peak: CUDA only
                if CUDA:
                    torch.cuda.synchronize()
                    torch.cuda.reset_peak_memory_stats()
                    before = torch.cuda.memory_allocated()
                    call()
                    torch.cuda.synchronize()
                    peak = (torch.cuda.max_memory_allocated() - before) / 2**20
                rounds = []
                for _ in range(ARGS.rounds):
                    t0 = sync_time()
                    for _ in range(ARGS.reps):
                        call()
                    rounds.append((sync_time() - t0) * 1e3 / ARGS.reps)
            except torch.cuda.OutOfMemoryError:
                print(json.dumps({"side": "torch", "skipped": "sdpa", "len": length, "d": d, "reason": "out of memory"}))
                continue
            ms = statistics.median(rounds)
            flops = 7.0 * b * h * length * length * d
            print(json.dumps({"side": "torch", "kind": "sdpa", "d": d, "len": length, "batch": b, "heads": h,
                              "dtype": ARGS.dtype, "ms": ms, "tflops": flops / (ms * 1e-3) / 1e12, "peak_mib": peak}),
                  flush=True)
            print(f"sdpa d {d} L {length}: {ms:.3f} ms", file=sys.stderr)
            del q, k, v, dout


# ---------------------------------------------------------------- training

class RMSNorm(torch.nn.Module):
    def __init__(self, dim, eps):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x):
        xf = x.float()
        return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)).to(x.dtype) * self.weight.to(x.dtype)


def rope_tables(t, d, theta):
    inv = theta ** (-torch.arange(0, d // 2, dtype=torch.float64, device=DEV) * 2.0 / d)
    ang = torch.arange(t, dtype=torch.float64, device=DEV)[:, None] * inv[None, :]
    return torch.cos(ang).float(), torch.sin(ang).float()


def rope(x, cos, sin):  # x (B, T, H, D), rotate_half
    half = x.shape[-1] // 2
    a, b = x[..., :half], x[..., half:]
    c, s = cos[None, :, None, :].to(x.dtype), sin[None, :, None, :].to(x.dtype)
    return torch.cat([a * c - b * s, b * c + a * s], dim=-1)


class Block(torch.nn.Module):
    def __init__(self, m, gqa):
        super().__init__()
        d, h, kv = m["d_model"], m["n_heads"], m["n_kv_heads"]
        hd = d // h
        self.h, self.kv, self.hd = h, kv, hd
        self.gqa = gqa  # SDPA reads the shared k/v heads itself (enable_gqa); else k/v are expanded
        self.input_layernorm = RMSNorm(d, m["norm_eps"])
        self.q_proj = torch.nn.Linear(d, h * hd, bias=False)
        self.k_proj = torch.nn.Linear(d, kv * hd, bias=False)
        self.v_proj = torch.nn.Linear(d, kv * hd, bias=False)
        self.o_proj = torch.nn.Linear(h * hd, d, bias=False)
        self.post_attention_layernorm = RMSNorm(d, m["norm_eps"])
        self.gate_proj = torch.nn.Linear(d, m["d_ff"], bias=False)
        self.up_proj = torch.nn.Linear(d, m["d_ff"], bias=False)
        self.down_proj = torch.nn.Linear(m["d_ff"], d, bias=False)
        # darkformer's MLP kinds: swiglu (SiLU gate), geglu (exact GELU), geglu_tanh (GELU's tanh form).
        self.act = {"swiglu": F.silu, "geglu": F.gelu,
                    "geglu_tanh": lambda x: F.gelu(x, approximate="tanh")}[m["mlp"]]

    def forward(self, x, cos, sin):
        b, t, _ = x.shape
        y = self.input_layernorm(x)
        q = rope(self.q_proj(y).reshape(b, t, self.h, self.hd), cos, sin).transpose(1, 2)
        k = rope(self.k_proj(y).reshape(b, t, self.kv, self.hd), cos, sin).transpose(1, 2)
        v = self.v_proj(y).reshape(b, t, self.kv, self.hd).transpose(1, 2)
        if self.kv == self.h:
            a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        elif self.gqa:
            a = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        else:
            k = k.repeat_interleave(self.h // self.kv, dim=1)
            v = v.repeat_interleave(self.h // self.kv, dim=1)
            a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.o_proj(a.transpose(1, 2).reshape(b, t, self.h * self.hd))
        y = self.post_attention_layernorm(x)
        return x + self.down_proj(self.act(self.gate_proj(y)) * self.up_proj(y))


class Model(torch.nn.Module):
    def __init__(self, m):
        super().__init__()
        self.embed_tokens = torch.nn.Embedding(m["vocab_size"], m["d_model"])
        gqa = m["n_kv_heads"] != m["n_heads"] and sdpa_has_gqa()
        self.layers = torch.nn.ModuleList([Block(m, gqa) for _ in range(m["n_layers"])])
        self.norm = RMSNorm(m["d_model"], m["norm_eps"])
        self.lm_head = None if m["tie_embeddings"] else torch.nn.Linear(m["d_model"], m["vocab_size"], bias=False)
        for p in self.parameters():
            if p.dim() == 2:
                torch.nn.init.normal_(p, std=m["init_std"])
        self.cos, self.sin = rope_tables(m["seq_len"], m["d_model"] // m["n_heads"], m["rope_theta"])

    def forward(self, ids, targets):
        x = self.embed_tokens(ids)
        for layer in self.layers:
            x = layer(x, self.cos, self.sin)
        head = self.lm_head.weight if self.lm_head is not None else self.embed_tokens.weight
        logits = self.norm(x) @ head.to(x.dtype).t()
        # reshape, not view: targets is batch[:, 1:] of a (B, T + 1) batch, so not contiguous
        # (and logits need not be either, e.g. under torch.compile).
        return F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), targets.reshape(-1))


def bench_train():
    text = ARGS.model_json
    if text.startswith("@"):
        with open(text[1:]) as f:
            text = f.read()
    m = json.loads(text)
    m.setdefault("n_kv_heads", m["n_heads"])
    bf16 = m.get("precision", "f32") == "bf16"
    torch.manual_seed(m.get("seed", 0))
    model = Model(m).to(DEV)
    decay, no_decay = [], []
    for name, p in model.named_parameters():
        (no_decay if any(fnmatch.fnmatch(name, g) for g in m["no_decay"]) else decay).append(p)
    groups = [{"params": decay, "weight_decay": m["weight_decay"]}, {"params": no_decay, "weight_decay": 0.0}]
    common = dict(lr=m["lr"], betas=tuple(m["betas"]), eps=m["eps"])
    impl = {"fused": True}
    if not CUDA:
        # Fused AdamW on the CPU needs torch >= 2.4; older ones fail at construction or at the
        # first step, so probe a dummy parameter and fall back to foreach.
        try:
            p = torch.nn.Parameter(torch.zeros(4))
            p.grad = torch.ones(4)
            torch.optim.AdamW([p], **common, fused=True).step()
        except (TypeError, RuntimeError, ValueError):
            impl = {"foreach": True}
    print(f"torch_gpu.py: torch {torch.__version__} on {DEV.type}, AdamW {next(iter(impl))}", file=sys.stderr)
    opt = torch.optim.AdamW(groups, **common, **impl)
    step_fn = torch.compile(model) if ARGS.compile else model
    b, t, v = m["batch_size"], m["seq_len"], m["vocab_size"]
    gen = torch.Generator(device=DEV).manual_seed(12345)
    times, losses = [], []
    if CUDA:
        torch.cuda.reset_peak_memory_stats()
    for step in range(ARGS.warmup + ARGS.steps):
        batch = torch.randint(0, v, (b, t + 1), device=DEV, generator=gen)
        t0 = sync_time()
        opt.zero_grad(set_to_none=True)
        with torch.autocast(DEV.type, dtype=torch.bfloat16, enabled=bf16):
            loss = step_fn(batch[:, :-1], batch[:, 1:])
        loss.backward()
        if m["grad_clip"] > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), m["grad_clip"])
        opt.step()
        losses.append(loss.item())
        t1 = sync_time()
        if step >= ARGS.warmup:
            times.append(t1 - t0)
    med = statistics.median(times)
    params = sum(p.numel() for p in model.parameters())
    print(json.dumps({"side": "torch", "mode": "compile" if ARGS.compile else "eager", "torch": torch.__version__,
                      "precision": "bf16" if bf16 else "f32", "steps": ARGS.steps, "median_step_ms": med * 1e3,
                      "tokens_per_s": b * t / med,
                      "peak_mem_mib": torch.cuda.max_memory_allocated() / 2**20 if CUDA else None,
                      "parameters": params, "first_loss": losses[0], "last_loss": losses[-1]}), flush=True)


if ARGS.mode == "attention":
    bench_attention()
else:
    bench_train()
