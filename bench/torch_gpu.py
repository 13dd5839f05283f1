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
side's. Needs torch with CUDA; without a GPU it says so and exits 1.
"""
import argparse
import fnmatch
import json
import math
import statistics
import sys
import time


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="mode", required=True)
    t = sub.add_parser("train")
    t.add_argument("--model-json", required=True, help="darkformer_bench_train --print-model output (or @FILE)")
    t.add_argument("--steps", type=int, default=20)
    t.add_argument("--warmup", type=int, default=5)
    t.add_argument("--compile", action="store_true", help="torch.compile the model")
    a = sub.add_parser("attention")
    a.add_argument("--lens", default="1024,2048,4096,8192,16384,32768,65536,131072")
    a.add_argument("--dims", default="64,128")
    a.add_argument("--tokens", type=int, default=131072)
    a.add_argument("--heads", type=int, default=8)
    a.add_argument("--dtype", choices=["bf16", "f32"], default="bf16")
    a.add_argument("--warmup", type=int, default=2)
    a.add_argument("--reps", type=int, default=5)
    a.add_argument("--rounds", type=int, default=3)
    return p.parse_args()


ARGS = parse_args()
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

if not torch.cuda.is_available():
    print("torch_gpu.py: no GPU (torch.cuda.is_available() is False)", file=sys.stderr)
    sys.exit(1)
DEV = torch.device("cuda")


def sync_time():
    torch.cuda.synchronize()
    return time.perf_counter()


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
    def __init__(self, m):
        super().__init__()
        d, h, kv = m["d_model"], m["n_heads"], m["n_kv_heads"]
        hd = d // h
        self.h, self.kv, self.hd = h, kv, hd
        self.input_layernorm = RMSNorm(d, m["norm_eps"])
        self.q_proj = torch.nn.Linear(d, h * hd, bias=False)
        self.k_proj = torch.nn.Linear(d, kv * hd, bias=False)
        self.v_proj = torch.nn.Linear(d, kv * hd, bias=False)
        self.o_proj = torch.nn.Linear(h * hd, d, bias=False)
        self.post_attention_layernorm = RMSNorm(d, m["norm_eps"])
        self.gate_proj = torch.nn.Linear(d, m["d_ff"], bias=False)
        self.up_proj = torch.nn.Linear(d, m["d_ff"], bias=False)
        self.down_proj = torch.nn.Linear(m["d_ff"], d, bias=False)
        self.act = F.silu if m["mlp"] == "swiglu" else F.gelu

    def forward(self, x, cos, sin):
        b, t, _ = x.shape
        y = self.input_layernorm(x)
        q = rope(self.q_proj(y).view(b, t, self.h, self.hd), cos, sin).transpose(1, 2)
        k = rope(self.k_proj(y).view(b, t, self.kv, self.hd), cos, sin).transpose(1, 2)
        v = self.v_proj(y).view(b, t, self.kv, self.hd).transpose(1, 2)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=self.kv != self.h)
        x = x + self.o_proj(a.transpose(1, 2).reshape(b, t, self.h * self.hd))
        y = self.post_attention_layernorm(x)
        return x + self.down_proj(self.act(self.gate_proj(y)) * self.up_proj(y))


class Model(torch.nn.Module):
    def __init__(self, m):
        super().__init__()
        self.embed_tokens = torch.nn.Embedding(m["vocab_size"], m["d_model"])
        self.layers = torch.nn.ModuleList([Block(m) for _ in range(m["n_layers"])])
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
        return F.cross_entropy(logits.float().view(-1, logits.shape[-1]), targets.view(-1))


def bench_train():
    text = ARGS.model_json
    if text.startswith("@"):
        text = open(text[1:]).read()
    m = json.loads(text)
    m.setdefault("n_kv_heads", m["n_heads"])
    bf16 = m.get("precision", "f32") == "bf16"
    torch.manual_seed(m.get("seed", 0))
    model = Model(m).to(DEV)
    decay, no_decay = [], []
    for name, p in model.named_parameters():
        (no_decay if any(fnmatch.fnmatch(name, g) for g in m["no_decay"]) else decay).append(p)
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": m["weight_decay"]},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=m["lr"], betas=tuple(m["betas"]), eps=m["eps"], fused=True)
    step_fn = torch.compile(model) if ARGS.compile else model
    b, t, v = m["batch_size"], m["seq_len"], m["vocab_size"]
    gen = torch.Generator(device=DEV).manual_seed(12345)
    times, losses = [], []
    torch.cuda.reset_peak_memory_stats()
    for step in range(ARGS.warmup + ARGS.steps):
        batch = torch.randint(0, v, (b, t + 1), device=DEV, generator=gen)
        t0 = sync_time()
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=bf16):
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
                      "tokens_per_s": b * t / med, "peak_mem_mib": torch.cuda.max_memory_allocated() / 2**20,
                      "parameters": params, "first_loss": losses[0], "last_loss": losses[-1]}), flush=True)


if ARGS.mode == "attention":
    bench_attention()
else:
    bench_train()
