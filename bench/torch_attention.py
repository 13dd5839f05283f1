#!/usr/bin/python3
"""The PyTorch side of scripts/bench_attention.sh: causal random-feature attention written
in PyTorch, forward + backward time and peak memory against sequence length, on the shapes
of darkformer_bench_attention (B = 1, H = 4 heads, head dim 64, m random features, float32).
Two implementations (--impl):

favor (the default): causal FAVOR+ the usual PyTorch way, performer-pytorch's
(lucidrains/performer-pytorch, FastAttention with causal=True and no CUDA extension),
transcribed:
  * q, k, v arrive as (B, L, H, d) leaves that require grad and are viewed as (B, H, L, d)
    (performer-pytorch's rearrange 'b n (h d) -> b h n d'); the output goes back to
    (B, L, H, d);
  * softmax_kernel: data_dash = (d^-1/4 x) . omega_j (one (m, d) Gaussian orthogonal
    projection per layer, repeated over batch and heads, as performer-pytorch),
    phi = m^-1/2 (exp(data_dash - |x|^2 d^-1/2 / 2 - max) + 1e-4), the max being
    detached, per row for queries and over (L, m) for keys (its stabiliser);
  * causal_linear_attention_noncuda: the sequence split into `--chunks` pieces
    (performer-pytorch: chunk_size = 128 pieces; 1 = the original unchunked form), per piece
    k_cumsum = last + k'.cumsum, D_inv = 1 / (q' . (k_cumsum + eps)), the outer products
    context = einsum('...nd,...ne->...nde', k', v), context_cumsum = last + context.cumsum
    (a (B, H, n, m, d) tensor: over all pieces autograd keeps B H L m d floats, the
    memory-hungry part), out = einsum('...nde,...nd,...n->...ne', context_cumsum, q', D_inv).
darkformer-pytorch: the causal linear path of darkformer-pytorch (PyPI; the closest peer of
our performer and darkformer kinds), DarkformerKernelAttention(head_dim, heads,
num_features=m, causal=True, causal_chunk_size=--causal-chunk-size) in training mode: per
chunk of that many tokens, exact masked scores inside the chunk and running (m) and (m, d)
key states across chunks, with per-token max stabilisers; its learned per-head geometry
(identity at initialisation) is a parameter, so backward computes its gradient as in
training. Its default chunk is 256 tokens, ours (attention.chunk_size) 64. q, k, v arrive
as (B, L, H, d) leaves viewed as (B, H, L, d), as its SelfAttention permutes them.

One call = clear the gradients, forward, out.backward(dout) with a fixed random dout.
After warm-up, R repetitions of N calls each (N so a repetition lasts >= --min-rep-ms);
the time is the median per-call time (R = --reps, 3 when one call takes >= 1 s).

Every (m, L) runs in its own child process (this script with --one), so its peak RSS is
its own: peak_rss_growth_mib = ru_maxrss after the first call - ru_maxrss just before it.
favor: a configuration whose B H L m d float32 tensor times --mem-factor exceeds
--mem-budget-gib is skipped (at L = 32768, m = 256: 8 GiB for that tensor alone);
darkformer-pytorch keeps no such tensor (estimate in dp_peak_gib); either is skipped when
predicted (from the previous L, linearly) to take longer than --budget-s.

Runs on Debian's torch 1.13 (favor only) and on PyPI torch (cache/venv-torch, made by
scripts/torch-venv.sh, with darkformer-pytorch).
Threads: --threads T sets torch.set_num_threads(T), OMP_NUM_THREADS=T, MKL_NUM_THREADS=T and
OPENBLAS_NUM_THREADS=--blas-threads (default T) before torch is imported (Debian's torch
does its matrix products in OpenBLAS's own pthread pool; PyPI's torch has no OpenBLAS, its
oneDNN / MKL run in the OpenMP pool); --omp-wait-policy sets OMP_WAIT_POLICY (default:
left as the environment has it; passive keeps idle OpenMP threads from spinning when other
processes compete for the cores, at the price of a wake-up per parallel region).
Output: one JSON object per configuration on stdout (progress on stderr).

  /usr/bin/python3 bench/torch_attention.py --threads 2 --features 64,256 --max-len 32768
  cache/venv-torch/bin/python bench/torch_attention.py --impl darkformer-pytorch --causal-chunk-size 64
"""
import argparse
import json
import math
import os
import resource
import subprocess
import sys
import time


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--features", default="64,256", help="random-feature counts m (default 64,256)")
    p.add_argument("--lens", default="", help="comma-separated lengths (default powers of two --min-len..--max-len)")
    p.add_argument("--min-len", type=int, default=256)
    p.add_argument("--max-len", type=int, default=32768)
    p.add_argument("--reps", type=int, default=5, help="timed repetitions (default 5; 3 when a call takes >= 1 s)")
    p.add_argument("--min-rep-ms", type=float, default=200.0, help="each repetition runs at least this long")
    p.add_argument("--warmup-ms", type=float, default=300.0, help="untimed calls first, at least this long")
    p.add_argument("--budget-s", type=float, default=120.0, help="skip a configuration predicted to take longer")
    p.add_argument("--mem-budget-gib", type=float, default=8.0,
                   help="skip when --mem-factor x the B H L m d float32 tensor exceeds this (default 8)")
    p.add_argument("--mem-factor", type=float, default=0.0,
                   help="estimated peak / size of the B H L m d tensor (default: 3.2 chunked, 4.5 unchunked; "
                        "measured 2.4-3.1 and 4.2-4.4)")
    p.add_argument("--impl", choices=["favor", "darkformer-pytorch"], default="favor",
                   help="favor (default): performer-pytorch's causal FAVOR+; darkformer-pytorch: its causal chunked path")
    p.add_argument("--chunks", type=int, default=128,
                   help="favor: pieces the sequence is split into (performer-pytorch's chunk_size, default 128; "
                        "1 = unchunked)")
    p.add_argument("--causal-chunk-size", type=int, default=256,
                   help="darkformer-pytorch: tokens per causal chunk (its causal_chunk_size; default 256, its "
                        "default; ours is 64)")
    p.add_argument("--threads", type=int, default=2, help="torch intra-op threads (default 2)")
    p.add_argument("--blas-threads", type=int, default=0, help="OpenBLAS threads (default: --threads)")
    p.add_argument("--omp-wait-policy", choices=["auto", "default", "passive", "active"], default="default",
                   help="OMP_WAIT_POLICY (default: the environment's; auto: passive when both pools have > 1 "
                        "thread, for a machine where other processes compete)")
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--head-dim", type=int, default=64)
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--self-check", action="store_true",
                   help="check the chunked form against the unchunked one and exact softmax at a small L, then exit")
    p.add_argument("--one", default="", help=argparse.SUPPRESS)  # internal: "m:L" in this process
    a = p.parse_args()
    if a.causal_chunk_size < 1 or a.chunks < 1:
        p.error("--chunks and --causal-chunk-size want positive integers")
    a.blas_threads = a.blas_threads or a.threads
    if a.omp_wait_policy == "auto":
        a.omp_wait_policy = "passive" if a.threads > 1 and a.blas_threads > 1 else "default"
    return a


ARGS = parse_args()
os.environ["OMP_NUM_THREADS"] = str(ARGS.threads)
os.environ["MKL_NUM_THREADS"] = str(ARGS.threads)
os.environ["OPENBLAS_NUM_THREADS"] = str(ARGS.blas_threads)
# A CPU benchmark: the PyPI wheel's CUDA libraries must not look for (or initialise) a GPU.
os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")
if ARGS.omp_wait_policy != "default":
    os.environ["OMP_WAIT_POLICY"] = ARGS.omp_wait_policy.upper()


def maxrss_mib():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0  # KiB on Linux


def lengths(a):
    if a.lens:
        return sorted({int(x) for x in a.lens.split(",") if x})
    out, L = [], a.min_len
    while L <= a.max_len:
        out.append(L)
        L *= 2
    return out


# ---------------------------------------------------------------- the PyTorch FAVOR+
def load_torch():
    import torch  # after the thread variables
    torch.set_num_threads(ARGS.threads)
    return torch


def orthogonal_matrix_chunk(torch, cols, gen):
    unstructured = torch.randn((cols, cols), generator=gen)
    q, _ = torch.linalg.qr(unstructured, mode="reduced")
    return q.t()


def gaussian_orthogonal_random_matrix(torch, nb_rows, nb_columns, gen):
    # performer-pytorch's: orthogonal blocks, rows scaled by the norms of Gaussian rows.
    blocks = []
    for _ in range(nb_rows // nb_columns):
        blocks.append(orthogonal_matrix_chunk(torch, nb_columns, gen))
    rest = nb_rows - (nb_rows // nb_columns) * nb_columns
    if rest > 0:
        blocks.append(orthogonal_matrix_chunk(torch, nb_columns, gen)[:rest])
    final = torch.cat(blocks)
    multiplier = torch.randn((nb_rows, nb_columns), generator=gen).norm(dim=1)
    return torch.diag(multiplier) @ final


def softmax_kernel(torch, data, projection_matrix, is_query, eps=1e-4):
    b, h, *_ = data.shape
    data_normalizer = data.shape[-1] ** -0.25
    ratio = projection_matrix.shape[0] ** -0.5
    projection = projection_matrix.expand(b, h, *projection_matrix.shape).type_as(data)  # repeat 'j d -> b h j d'
    data_dash = torch.einsum("...id,...jd->...ij", (data_normalizer * data), projection)
    diag_data = (data ** 2).sum(dim=-1)
    diag_data = ((diag_data / 2.0) * (data_normalizer ** 2)).unsqueeze(dim=-1)
    if is_query:
        data_dash = ratio * (torch.exp(data_dash - diag_data - torch.amax(data_dash, dim=-1, keepdim=True).detach()) + eps)
    else:
        data_dash = ratio * (torch.exp(data_dash - diag_data - torch.amax(data_dash, dim=(-1, -2), keepdim=True).detach()) + eps)
    return data_dash.type_as(data)


def causal_linear_attention_noncuda(torch, q, k, v, chunk_size=128, eps=1e-6):
    last_k_cumsum = 0
    last_context_cumsum = 0
    outs = []
    for q, k, v in zip(*map(lambda t: t.chunk(chunk_size, dim=-2), (q, k, v))):
        k_cumsum = last_k_cumsum + k.cumsum(dim=-2)
        D_inv = 1.0 / torch.einsum("...nd,...nd->...n", q, k_cumsum.type_as(q) + eps)
        context = torch.einsum("...nd,...ne->...nde", k, v)
        context_cumsum = last_context_cumsum + context.cumsum(dim=-3)
        out = torch.einsum("...nde,...nd,...n->...ne", context_cumsum, q, D_inv)
        last_k_cumsum = k_cumsum[:, :, -1:]
        last_context_cumsum = context_cumsum[:, :, -1:]
        outs.append(out)
    return torch.cat(outs, dim=-2)


def favor_causal(torch, q, k, v, projection, chunks):
    # (B, L, H, d) -> (B, H, L, d) views, as performer-pytorch's rearrange; back at the end.
    q, k, v = (t.permute(0, 2, 1, 3) for t in (q, k, v))
    qp = softmax_kernel(torch, q, projection, is_query=True)
    kp = softmax_kernel(torch, k, projection, is_query=False)
    out = causal_linear_attention_noncuda(torch, qp, kp, v, chunk_size=chunks)
    return out.permute(0, 2, 1, 3)


def darkformer_pytorch_attention(torch, m, chunk):
    """darkformer-pytorch's kernel attention, causal, in training mode (a fixed seed)."""
    try:
        from darkformer_pytorch import DarkformerKernelAttention
    except ImportError as e:
        raise SystemExit(f"torch_attention: darkformer-pytorch is not installed for {sys.executable} ({e}); "
                         "scripts/torch-venv.sh makes an environment with it")
    attn = DarkformerKernelAttention(ARGS.head_dim, ARGS.heads, num_features=m, causal=True,
                                     causal_chunk_size=chunk, projection_seed=ARGS.seed)
    return attn.train()


def darkformer_pytorch_causal(attn, q, k, v):
    # (B, L, H, d) -> (B, H, L, d) views, as its SelfAttention permutes them; back at the end.
    q, k, v = (t.permute(0, 2, 1, 3) for t in (q, k, v))
    return attn(q, k, v).permute(0, 2, 1, 3)


def dp_peak_gib(m, L, chunk):
    """Estimated peak RSS growth of one darkformer-pytorch pass (GiB): autograd keeps ~12
    (B, H, L, m) tensors (logits, features, per-chunk products), ~4 (B, H, L, chunk) score
    tensors and ~4 (m, d) states per chunk; x 1.3 + 40 MiB of fixed cost (measured at
    L = 1024 and 4096, m = 64 and 256, chunks 64 and 256: 0.6-1.1x of this estimate)."""
    bh = ARGS.batch * ARGS.heads
    floats = bh * L * (12 * m + 4 * min(chunk, L)) + 4 * bh * math.ceil(L / chunk) * m * ARGS.head_dim
    return 1.3 * floats * 4 / 2**30 + 40 / 1024


def version_of(module):
    try:
        from importlib.metadata import version
        return version(module)
    except Exception:
        return None


def inputs(torch, m, L):
    gen = torch.Generator().manual_seed(ARGS.seed)
    shape = (ARGS.batch, L, ARGS.heads, ARGS.head_dim)
    q, k, v, dout = (torch.randn(shape, generator=gen) for _ in range(4))
    for t in (q, k, v):
        t.requires_grad_(True)
    projection = gaussian_orthogonal_random_matrix(torch, m, ARGS.head_dim, gen)
    return q, k, v, dout, projection


# ---------------------------------------------------------------- child: one config
def run_one(spec):
    m, L = (int(x) for x in spec.split(":"))
    torch = load_torch()
    q, k, v, dout, projection = inputs(torch, m, L)
    phases = {"fwd": 0.0, "bwd": 0.0}
    if ARGS.impl == "darkformer-pytorch":
        attn = darkformer_pytorch_attention(torch, m, ARGS.causal_chunk_size)
        leaves = [q, k, v] + list(attn.parameters())
        forward = lambda: darkformer_pytorch_causal(attn, q, k, v)  # noqa: E731
    else:
        leaves = [q, k, v]
        forward = lambda: favor_causal(torch, q, k, v, projection, ARGS.chunks)  # noqa: E731

    def call():
        for t in leaves:
            t.grad = None
        t0 = time.perf_counter()
        out = forward()
        t1 = time.perf_counter()
        out.backward(dout)
        t2 = time.perf_counter()
        phases["fwd"] += t1 - t0
        phases["bwd"] += t2 - t1

    rss_before = maxrss_mib()
    t0 = time.perf_counter()
    call()  # first call: peak memory
    fastest = time.perf_counter() - t0
    rss_peak = maxrss_mib()
    for t in (q, k, v):
        if not torch.isfinite(t.grad).all():
            raise SystemExit(f"torch_attention: non-finite gradient at m={m} L={L}")
    warm, calls = fastest, 1
    while fastest < 1.0 and (calls < 2 or warm < ARGS.warmup_ms * 1e-3):
        c0 = time.perf_counter()
        call()
        t = time.perf_counter() - c0
        warm += t
        fastest = min(fastest, t)
        calls += 1
    inner = max(1, math.ceil(ARGS.min_rep_ms * 1e-3 / max(fastest, 1e-9)))
    reps = min(ARGS.reps, 3) if fastest >= 1.0 else ARGS.reps
    per_call, fwd, bwd = [], [], []
    for _ in range(reps):
        phases["fwd"] = phases["bwd"] = 0.0
        r0 = time.perf_counter()
        for _ in range(inner):
            call()
        per_call.append((time.perf_counter() - r0) / inner)
        fwd.append(phases["fwd"] / inner)
        bwd.append(phases["bwd"] / inner)

    def med(x):
        x = sorted(x)
        n = len(x)
        return x[n // 2] if n % 2 else 0.5 * (x[n // 2 - 1] + x[n // 2])

    if ARGS.impl == "darkformer-pytorch":
        impl = {"impl": "darkformer-pytorch", "kind": "darkformer-pytorch DarkformerKernelAttention, causal chunked",
                "causal_chunk_size": ARGS.causal_chunk_size, "darkformer_pytorch": version_of("darkformer-pytorch")}
    else:
        impl = {"impl": "favor", "kind": "favor+ (performer-pytorch, cumsum)", "chunks": ARGS.chunks}
    print(json.dumps({
        "side": "pytorch", **impl, "m": m, "L": L,
        "batch": ARGS.batch, "heads": ARGS.heads, "head_dim": ARGS.head_dim,
        "threads": torch.get_num_threads(), "blas_threads": ARGS.blas_threads,
        "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY", "unset"), "torch": torch.__version__,
        "reps": reps, "inner": inner, "ms": med(per_call) * 1e3, "ms_min": min(per_call) * 1e3,
        "ms_max": max(per_call) * 1e3, "fwd_ms": med(fwd) * 1e3, "bwd_ms": med(bwd) * 1e3,
        "peak_rss_mib": maxrss_mib(), "rss_before_mib": rss_before,
        "peak_rss_growth_mib": rss_peak - rss_before,
        "context_tensor_mib": ARGS.batch * ARGS.heads * L * m * ARGS.head_dim * 4 / 2**20,
    }), flush=True)


def self_check():
    # The chunked form equals the unchunked one, and with many features approaches softmax.
    torch = load_torch()
    torch.set_default_dtype(torch.float64)
    L, m = 64, 4096
    q, k, v, dout, projection = inputs(torch, m, L)
    q, k, v = (t.detach().double() * 0.5 for t in (q, k, v))
    if ARGS.impl == "darkformer-pytorch":
        attn = darkformer_pytorch_attention(torch, m, 8)
        a = darkformer_pytorch_causal(attn.double(), q, k, v).detach()
        attn.causal_chunk_size = L
        b = darkformer_pytorch_causal(attn, q, k, v).detach()
    else:
        a = favor_causal(torch, q, k, v, projection.double(), 8)
        b = favor_causal(torch, q, k, v, projection.double(), 1)
    qh, kh, vh = (t.permute(0, 2, 1, 3) for t in (q, k, v))
    s = (qh @ kh.transpose(-1, -2)) / math.sqrt(ARGS.head_dim)
    s = s.masked_fill(torch.ones(L, L, dtype=torch.bool).triu(1), float("-inf"))
    exact = (s.softmax(-1) @ vh).permute(0, 2, 1, 3)
    chunk_err = (a - b).abs().max().item()
    approx_err = ((a - exact).norm() / exact.norm()).item()
    print(f"{ARGS.impl}: chunked vs unchunked max |diff| {chunk_err:.2e}; m={m} vs exact softmax relative error "
          f"{approx_err:.3f}")
    ok = chunk_err < 1e-9 and approx_err < 0.2  # the +1e-4 feature eps biases it a little
    print("self-check", "ok" if ok else "FAILED")
    return 0 if ok else 1


# ---------------------------------------------------------------- driver
def main():
    if ARGS.self_check:
        return self_check()
    if ARGS.one:
        run_one(ARGS.one)
        return 0
    features = [int(x) for x in ARGS.features.split(",") if x]
    factor = ARGS.mem_factor or (3.2 if ARGS.chunks > 1 else 4.5)
    common = ["--reps", str(ARGS.reps), "--min-rep-ms", str(ARGS.min_rep_ms), "--warmup-ms", str(ARGS.warmup_ms),
              "--impl", ARGS.impl, "--chunks", str(ARGS.chunks), "--causal-chunk-size", str(ARGS.causal_chunk_size),
              "--threads", str(ARGS.threads), "--blas-threads", str(ARGS.blas_threads),
              "--omp-wait-policy", ARGS.omp_wait_policy, "--batch", str(ARGS.batch), "--heads", str(ARGS.heads),
              "--head-dim", str(ARGS.head_dim), "--seed", str(ARGS.seed)]
    last = {}
    failed = 0
    start = time.perf_counter()
    label = "favor" if ARGS.impl == "favor" else f"dkf-pt c{ARGS.causal_chunk_size}"
    for L in lengths(ARGS):
        for m in features:
            row = {"side": "pytorch", "impl": ARGS.impl, "m": m, "L": L}
            if ARGS.impl == "darkformer-pytorch":
                row["causal_chunk_size"] = ARGS.causal_chunk_size
            context_gib = ARGS.batch * ARGS.heads * L * m * ARGS.head_dim * 4 / 2**30
            if ARGS.impl == "darkformer-pytorch":
                estimate = dp_peak_gib(m, L, ARGS.causal_chunk_size)
                if estimate > ARGS.mem_budget_gib:
                    row["skipped"] = (f"skipped: estimated peak ~{estimate:.1f} GiB > --mem-budget-gib "
                                      f"{ARGS.mem_budget_gib:g}")
            elif context_gib * factor > ARGS.mem_budget_gib:
                row["skipped"] = (f"skipped: the (B, H, L, m, d) context tensor is {context_gib:.1f} GiB, estimated peak "
                                  f"~{context_gib * factor:.1f} GiB > --mem-budget-gib {ARGS.mem_budget_gib:g}")
            elif m in last:
                per_call = last[m][1] * L / last[m][0]
                predicted = per_call * (1 + min(ARGS.reps, 3)) if per_call >= 1 else \
                    max(per_call, ARGS.warmup_ms * 1e-3) + ARGS.reps * max(per_call, ARGS.min_rep_ms * 1e-3)
                if predicted > ARGS.budget_s:
                    row["skipped"] = f"skipped (would take ~{predicted:.0f} s > --budget-s {ARGS.budget_s:g})"
            if "skipped" in row:
                print(f"           {label:<10} m={m:<4} L={L:<6} {row['skipped']}", file=sys.stderr)
                print(json.dumps(row), flush=True)
                continue
            print(f"[{time.perf_counter() - start:6.0f} s] {label:<10} m={m:<4} L={L:<6} ...", end="", file=sys.stderr,
                  flush=True)
            proc = subprocess.run([sys.executable, os.path.abspath(__file__), "--one", f"{m}:{L}"] + common,
                                  stdout=subprocess.PIPE, text=True)
            try:
                if proc.returncode != 0:
                    raise ValueError(f"child exited with status {proc.returncode}")
                res = json.loads(proc.stdout.strip().splitlines()[-1])
            except (ValueError, IndexError) as e:
                print(f" FAILED: {e}", file=sys.stderr)
                row["skipped"] = f"failed: {e}"
                print(json.dumps(row), flush=True)
                failed += 1
                continue
            print(f" {res['ms']:.2f} ms, RSS +{res['peak_rss_growth_mib']:.0f} MiB", file=sys.stderr)
            last[m] = (L, res["ms"] * 1e-3)
            print(json.dumps(res), flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
