#!/usr/bin/env python3
"""MQAR in PyTorch: the peer that says how many steps a softmax model needs to learn the task
(defaults: configs/mqar.json's model and data), written apart from darkformer (docs/long-context.md,
"Associative recall (MQAR)"). Same layout as data/mqar.cpp (Zoology's: k1 v1 ... km vm, then
each key queried once at slots drawn with weight (slot + 1)^(power - 1), its value after it,
filler 0 elsewhere; keys 1..(V - 1) / 2, values above; only the queried values scored), its
own random draws; the same model (Llama-style: RMSNorm, RoPE, SwiGLU, tied embedding, init
std 0.02) and AdamW (betas 0.9 / 0.95, decay off norms and the embedding, clip 1.0, linear
warm-up then cosine to 0.1 of the peak).

    python=$(scripts/torch-venv.sh) && $python scripts/mqar_torch.py --d-model 64 --heads 2 --vocab 128 \
        --batch 16 --lr 3e-3 --pairs 4 8 --steps 4000 --eval-every 500
Prints recall accuracy on a fixed validation set at every --eval-every steps.
"""
import argparse
import math
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


def mqar_sequence(rng, seq_len, vocab, pairs, power):
    n = seq_len + 1
    keys = (vocab - 1) // 2
    key_ids = rng.choice(np.arange(1, keys + 1), size=pairs, replace=False)
    value_ids = keys + 1 + rng.integers(0, vocab - 1 - keys, size=pairs)
    ids = np.zeros(n, dtype=np.int64)
    ids[0:2 * pairs:2], ids[1:2 * pairs:2] = key_ids, value_ids
    slots = (n - 2 * pairs) // 2
    weight = np.arange(1, slots + 1, dtype=np.float64) ** (power - 1.0)
    chosen = np.sort(rng.choice(slots, size=pairs, replace=False, p=weight / weight.sum()))
    order = rng.permutation(pairs)
    targets = np.full(n, -100, dtype=np.int64)
    for slot, pair in zip(chosen, order):
        q = 2 * pairs + 2 * slot
        ids[q], ids[q + 1] = key_ids[pair], value_ids[pair]
        targets[q + 1] = value_ids[pair]
    return ids, targets


def mqar_batch(rng, batch, seq_len, vocab, pair_choices, power):
    rows = [mqar_sequence(rng, seq_len, vocab, int(rng.choice(pair_choices)), power) for _ in range(batch)]
    ids = torch.from_numpy(np.stack([r[0] for r in rows]))
    targets = torch.from_numpy(np.stack([r[1] for r in rows]))
    return ids[:, :-1], targets[:, 1:]


def rope(x, theta=10000.0):
    # x: (B, H, T, D), rotate-half pairing.
    T, D = x.shape[-2], x.shape[-1]
    freq = theta ** (-torch.arange(0, D, 2, dtype=torch.float32) / D)
    angle = torch.arange(T, dtype=torch.float32)[:, None] * freq[None, :]
    cos, sin = angle.cos(), angle.sin()
    x1, x2 = x[..., : D // 2], x[..., D // 2:]
    return torch.cat([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1)


class Block(nn.Module):
    def __init__(self, d, heads, d_ff):
        super().__init__()
        self.heads = heads
        self.attn_norm, self.mlp_norm = nn.RMSNorm(d, eps=1e-5), nn.RMSNorm(d, eps=1e-5)
        self.qkv = nn.Linear(d, 3 * d, bias=False)
        self.o = nn.Linear(d, d, bias=False)
        self.gate_up = nn.Linear(d, 2 * d_ff, bias=False)
        self.down = nn.Linear(d_ff, d, bias=False)

    def forward(self, x):
        B, T, d = x.shape
        q, k, v = self.qkv(self.attn_norm(x)).view(B, T, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(rope(q), rope(k), v, is_causal=True)
        x = x + self.o(a.transpose(1, 2).reshape(B, T, d))
        g, u = self.gate_up(self.mlp_norm(x)).chunk(2, dim=-1)
        return x + self.down(F.silu(g) * u)


class Model(nn.Module):
    def __init__(self, vocab, d, layers, heads, d_ff):
        super().__init__()
        self.embed = nn.Embedding(vocab, d)
        self.blocks = nn.ModuleList(Block(d, heads, d_ff) for _ in range(layers))
        self.norm = nn.RMSNorm(d, eps=1e-5)
        for p in self.parameters():
            if p.dim() == 2:
                nn.init.normal_(p, std=0.02)

    def forward(self, ids):
        x = self.embed(ids)
        for b in self.blocks:
            x = b(x)
        return self.norm(x) @ self.embed.weight.T


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seq-len", type=int, default=64)
    ap.add_argument("--pairs", type=int, nargs="+", default=[4])
    ap.add_argument("--vocab", type=int, default=256)
    ap.add_argument("--power", type=float, default=0.01)
    ap.add_argument("--d-model", type=int, default=128)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--heads", type=int, default=1)
    ap.add_argument("--steps", type=int, default=4000)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--weight-decay", type=float, default=0.1)
    ap.add_argument("--warmup", type=int, default=30)
    ap.add_argument("--eval-every", type=int, default=500)
    ap.add_argument("--val-sequences", type=int, default=240)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=1)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    d_ff = 64 * max(1, (a.d_model + 12) // 24)  # darkformer's default (nn/model_config.cpp): ~8 d_model / 3
    model = Model(a.vocab, a.d_model, a.layers, a.heads, d_ff)
    decay, no_decay = [], []
    for n, p in model.named_parameters():  # darkformer's no_decay: the norms and the embedding
        (decay if p.dim() == 2 and "embed" not in n else no_decay).append(p)
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": a.weight_decay},
                             {"params": no_decay, "weight_decay": 0.0}], lr=a.lr, betas=(0.9, 0.95), eps=1e-8)

    def lr_at(step):  # step 1-based, as darkformer's schedule
        if step <= a.warmup:
            return a.lr * step / max(1, a.warmup)
        t = (step - a.warmup) / max(1, a.steps - a.warmup)
        return a.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * t)))

    val_rng = np.random.default_rng(10_000 + a.seed)
    val = [mqar_batch(val_rng, 1, a.seq_len, a.vocab, [a.pairs[i % len(a.pairs)]], a.power) for i in range(a.val_sequences)]
    val_ids, val_targets = torch.cat([v[0] for v in val]), torch.cat([v[1] for v in val])
    rng = np.random.default_rng(a.seed)
    start = time.time()
    for step in range(1, a.steps + 1):
        ids, targets = mqar_batch(rng, a.batch, a.seq_len, a.vocab, a.pairs, a.power)
        for g in opt.param_groups:
            g["lr"] = lr_at(step)
        loss = F.cross_entropy(model(ids).flatten(0, 1), targets.flatten(), ignore_index=-100)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if step % a.eval_every == 0 or step == a.steps:
            with torch.no_grad():
                pred = model(val_ids).argmax(-1)
            scored = val_targets != -100
            acc = (pred[scored] == val_targets[scored]).float().mean().item()
            print(f"step {step} | loss {loss.item():.4f} | MQAR recall accuracy {acc:.4f} | {time.time() - start:.0f} s", flush=True)


if __name__ == "__main__":
    main()
