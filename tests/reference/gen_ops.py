#!/usr/bin/python3
"""Generates tests/reference/ops_v1.bin: PyTorch forward values and gradients for the
differentiable ops of autograd/ops.h, read by tests/test_torch_reference.cpp.

Run from the repository root (Debian's python with torch: apt-get install python3-torch):
    /usr/bin/python3 tests/reference/gen_ops.py
CI never runs this script; it only reads the committed ops_v1.bin.

Every case is computed in float64. For a case with output `out` and a random upstream
gradient `dout` (same shape), the stored gradients are those of sum(out * dout) with
respect to each float input that is marked differentiable. Inputs are drawn from a
per-case torch.Generator seeded with BASE_SEED + crc32(name), so adding or editing one
case leaves the others' numbers unchanged. Inputs stay away from kinks (relu/abs at 0,
maximum/minimum ties, pow/log/sqrt of non-positive values), except the case max_ties,
which checks the documented rule that ties share the gradient (torch.amax splits it
evenly).

File format ops_v1.bin (all integers and floats little-endian):
    header:  magic    5 bytes  b"DKREF"
             version  u32      1
             n_cases  u32
    case:    name_len u32, name (utf-8, [A-Za-z0-9_], also the GoogleTest parameter name)
             n_tensors u32, then n_tensors tensors:
    tensor:  role   u8   0 = input, 1 = output, 2 = dout, 3 = grad
             slot   u32  input: its position among the case's inputs (0, 1, ...);
                         grad: the slot of the input it is the gradient of; else 0
             dtype  u8   0 = f64, 1 = i64
             rank   u32
             dims   i64 * rank
             data   numel * 8 bytes (f64 or i64), row-major
    trailer: 5 bytes b"DKEND"   (a truncated file fails to parse)
Tensors of a case come in the order: inputs (slot order), output, dout, grads (slot order).
A float input with a grad tensor requires grad; other inputs (i64 ids, 0/1 masks) do not.
A case without grads (comparisons) stores no dout. A rank-0 tensor has no dims, 1 element.
"""
import os
import struct
import sys
import zlib

import torch
import torch.nn.functional as F

MAGIC = b"DKREF"
TRAILER = b"DKEND"
VERSION = 1
BASE_SEED = 20240601
ROLE_INPUT, ROLE_OUTPUT, ROLE_DOUT, ROLE_GRAD = 0, 1, 2, 3
DTYPE_F64, DTYPE_I64 = 0, 1
# The float32 forward tolerance used by the C++ test (|got - want| <= ATOL + RTOL * |want|).
# Checked here against torch's own float32 forward so the test does not ask the impossible.
F32_RTOL, F32_ATOL = 1e-5, 1e-5

OUT_PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "ops_v1.bin")

CASES = []  # (name, make_inputs(gen) -> [(tensor, differentiable)], fn(*inputs) -> out)


def case(name):
    def register(make_and_fn):
        make, fn = make_and_fn()
        CASES.append((name, make, fn))
        return make_and_fn
    return register


# ---- input helpers (all float64) ----
def randn(g, *shape, scale=1.0):
    return torch.randn(tuple(shape), generator=g, dtype=torch.float64) * scale


def uniform(g, lo, hi, *shape):
    return lo + (hi - lo) * torch.rand(tuple(shape), generator=g, dtype=torch.float64)


def away_from_zero(g, lo, hi, *shape):
    """|x| in [lo, hi], random sign."""
    mag = uniform(g, lo, hi, *shape)
    sign = torch.where(torch.rand(*shape, generator=g) < 0.5, -1.0, 1.0).to(torch.float64)
    return mag * sign


def apart(a, b, margin=1e-3):
    """Asserts a and b (broadcast) never come within margin: no ties, stable comparisons."""
    assert (a - b).abs().min().item() > margin, "inputs too close; change the case"


def ids(g, high, *shape):
    return torch.randint(0, high, shape, generator=g, dtype=torch.int64)


def mask01(g, *shape, p=0.5):
    return (torch.rand(*shape, generator=g) < p).to(torch.float64)


D, C = True, False  # differentiable / constant input


# ---- linear algebra ----
@case("matmul_5x7_7x3")
def _():
    return (lambda g: [(randn(g, 5, 7), D), (randn(g, 7, 3), D)],
            lambda a, b: a @ b)


@case("matmul_trans_a_k33")
def _():  # a stored (k, m) = (33, 5); out = a^T b
    return (lambda g: [(randn(g, 33, 5), D), (randn(g, 33, 7), D)],
            lambda a, b: a.transpose(-1, -2) @ b)


@case("matmul_trans_b")
def _():  # b stored (n, k) = (5, 7); out = a b^T
    return (lambda g: [(randn(g, 3, 7), D), (randn(g, 5, 7), D)],
            lambda a, b: a @ b.transpose(-1, -2))


@case("matmul_trans_ab_batch")
def _():  # a (2, k=7, m=3), b (2, n=5, k=7) -> (2, 3, 5)
    return (lambda g: [(randn(g, 2, 7, 3), D), (randn(g, 2, 5, 7), D)],
            lambda a, b: a.transpose(-1, -2) @ b.transpose(-1, -2))


@case("matmul_broadcast_batch")
def _():  # (2, 1, 3, 5) @ (4, 5, 7) -> (2, 4, 3, 7)
    return (lambda g: [(randn(g, 2, 1, 3, 5), D), (randn(g, 4, 5, 7), D)],
            lambda a, b: a @ b)


# ---- elementwise binary with broadcasting ----
@case("add_broadcast")
def _():  # (3, 1, 5) + (4, 5) -> (3, 4, 5)
    return (lambda g: [(randn(g, 3, 1, 5), D), (randn(g, 4, 5), D)],
            lambda a, b: a + b)


@case("sub_broadcast")
def _():  # (5, 1) - (7) -> (5, 7)
    return (lambda g: [(randn(g, 5, 1), D), (randn(g, 7), D)],
            lambda a, b: a - b)


@case("mul_broadcast")
def _():  # (2, 3, 5) * (3, 1) -> (2, 3, 5)
    return (lambda g: [(randn(g, 2, 3, 5), D), (randn(g, 3, 1), D)],
            lambda a, b: a * b)


@case("div_broadcast")
def _():  # (3, 5, 7) / (5, 1), divisor away from 0
    return (lambda g: [(randn(g, 3, 5, 7), D), (away_from_zero(g, 0.5, 2.0, 5, 1), D)],
            lambda a, b: a / b)


@case("pow_broadcast")
def _():  # (3, 7) ** (7), base in [0.5, 2] so both gradients exist
    return (lambda g: [(uniform(g, 0.5, 2.0, 3, 7), D), (uniform(g, -1.5, 1.5, 7), D)],
            lambda a, b: torch.pow(a, b))


def _two_apart(g, sa, sb):
    while True:
        a, b = randn(g, *sa), randn(g, *sb)
        if (a - b).abs().min().item() > 1e-3:
            return a, b


@case("maximum_broadcast")
def _():  # (5, 7) vs (7): no ties
    def make(g):
        a, b = _two_apart(g, (5, 7), (7,))
        return [(a, D), (b, D)]
    return make, lambda a, b: torch.maximum(a, b)


@case("minimum_broadcast")
def _():  # (3, 1, 5) vs (4, 5): no ties
    def make(g):
        a, b = _two_apart(g, (3, 1, 5), (4, 5))
        return [(a, D), (b, D)]
    return make, lambda a, b: torch.minimum(a, b)


@case("compare_ops")
def _():  # forward only; c equals a in about half the entries
    def make(g):
        a, b = _two_apart(g, (3, 5), (5,))
        c = torch.where(mask01(g, 3, 5).bool(), a, a + away_from_zero(g, 0.1, 1.0, 3, 5))
        return [(a, C), (b, C), (c, C)]

    def fn(a, b, c):
        f = lambda t: t.to(torch.float64)
        return (f(a < b) + 2 * f(a <= c) + 4 * f(a > b) + 8 * f(a >= c) + 16 * f(a == c)
                + 32 * f(a != b))
    return make, fn


# ---- elementwise unary ----
def _unary(name, make, fn):
    CASES.append((name, lambda g: [(make(g), D)], fn))


_unary("exp", lambda g: uniform(g, -3.0, 3.0, 3, 33), torch.exp)
_unary("log", lambda g: uniform(g, 0.1, 5.0, 3, 33), torch.log)
_unary("sqrt", lambda g: uniform(g, 0.1, 5.0, 3, 33), torch.sqrt)
_unary("rsqrt", lambda g: uniform(g, 0.1, 5.0, 3, 33), torch.rsqrt)
_unary("tanh", lambda g: uniform(g, -3.0, 3.0, 3, 33), torch.tanh)
_unary("sigmoid", lambda g: uniform(g, -6.0, 6.0, 3, 33), torch.sigmoid)
_unary("silu", lambda g: uniform(g, -6.0, 6.0, 3, 33), F.silu)
_unary("gelu", lambda g: uniform(g, -5.0, 5.0, 3, 33), F.gelu)
_unary("gelu_tanh", lambda g: uniform(g, -5.0, 5.0, 3, 33),
       lambda x: F.gelu(x, approximate="tanh"))
_unary("relu", lambda g: away_from_zero(g, 0.05, 3.0, 3, 33), torch.relu)
_unary("neg", lambda g: randn(g, 5, 7), torch.neg)
_unary("abs", lambda g: away_from_zero(g, 0.05, 3.0, 5, 7), torch.abs)
_unary("square", lambda g: randn(g, 5, 7), torch.square)
_unary("sin", lambda g: uniform(g, -4.0, 4.0, 5, 7), torch.sin)
_unary("cos", lambda g: uniform(g, -4.0, 4.0, 5, 7), torch.cos)
_unary("reciprocal", lambda g: away_from_zero(g, 0.3, 3.0, 5, 7), torch.reciprocal)
_unary("add_scalar", lambda g: randn(g, 5, 7), lambda x: x + 0.75)
_unary("mul_scalar", lambda g: randn(g, 5, 7), lambda x: x * -1.25)
_unary("pow_scalar", lambda g: uniform(g, 0.2, 3.0, 5, 7), lambda x: torch.pow(x, 1.7))


# ---- reductions ----
@case("sum_axes02_keepdim")
def _():
    return (lambda g: [(randn(g, 3, 5, 7), D)],
            lambda x: x.sum(dim=(0, 2), keepdim=True))


@case("sum_all")
def _():  # empty axes = all axes -> rank 0
    return lambda g: [(randn(g, 3, 5, 7), D)], lambda x: x.sum()


@case("mean_axis1")
def _():
    return lambda g: [(randn(g, 3, 5, 7), D)], lambda x: x.mean(dim=1)


@case("max_last_keepdim")
def _():  # continuous values: no ties
    return lambda g: [(randn(g, 5, 33), D)], lambda x: x.amax(dim=-1, keepdim=True)


@case("max_ties")
def _():  # values on a 0.5 grid in [-1, 1]: many ties along axis 2, gradient split evenly
    return (lambda g: [(torch.randint(-2, 3, (3, 5, 7), generator=g).to(torch.float64) * 0.5, D)],
            lambda x: x.amax(dim=2))


@case("min_axis0_via_reduce")
def _():
    return lambda g: [(randn(g, 5, 7), D)], lambda x: x.amin(dim=0)


@case("logsumexp_axis1_keepdim")
def _():
    return (lambda g: [(randn(g, 3, 7, 5, scale=3.0), D)],
            lambda x: torch.logsumexp(x, dim=1, keepdim=True))


@case("logsumexp_axes02")
def _():
    return (lambda g: [(randn(g, 3, 5, 7, scale=3.0), D)],
            lambda x: torch.logsumexp(x, dim=(0, 2)))


@case("sum_to")
def _():  # (3, 5, 7) summed down to (5, 1)
    return (lambda g: [(randn(g, 3, 5, 7), D)],
            lambda x: x.sum(dim=0).sum(dim=-1, keepdim=True))


# ---- softmax ----
@case("softmax_last")
def _():
    return lambda g: [(randn(g, 3, 5, 33, scale=2.0), D)], lambda x: torch.softmax(x, dim=-1)


@case("softmax_mid_axis")
def _():
    return lambda g: [(randn(g, 3, 7, 5, scale=2.0), D)], lambda x: torch.softmax(x, dim=1)


@case("log_softmax_last")
def _():
    return lambda g: [(randn(g, 5, 33, scale=2.0), D)], lambda x: torch.log_softmax(x, dim=-1)


@case("log_softmax_mid_axis")
def _():  # axis -2 of (3, 7, 5)
    return lambda g: [(randn(g, 3, 7, 5, scale=2.0), D)], lambda x: torch.log_softmax(x, dim=-2)


# ---- views and layout ----
@case("views_chain")
def _():
    def fn(x, w):
        y = x.permute(2, 0, 1).reshape(7, 15).transpose(0, 1).unsqueeze(0).expand(2, 15, 7)
        return y * w.squeeze(3)
    return lambda g: [(randn(g, 3, 5, 7), D), (randn(g, 2, 1, 7, 1), D)], fn


@case("slice_step_negative")
def _():  # x[:, 1:7:2, -4:5]
    return lambda g: [(randn(g, 3, 7, 5), D)], lambda x: x[:, 1:7:2, -4:5]


@case("cast_roundtrip")
def _():  # f64 -> f32 -> f64 of a transposed copy: rounds like torch .float()
    return (lambda g: [(randn(g, 5, 7), D)],
            lambda x: x.transpose(0, 1).contiguous().float().double())


# ---- indexing ----
@case("embedding_repeated_ids")
def _():
    def make(g):
        i = ids(g, 7, 3, 4)
        i[0, 0] = i[1, 2] = i[2, 3] = 3  # id 3 three times: the backward must sum
        return [(randn(g, 7, 5), D), (i, C)]
    return make, lambda w, i: F.embedding(i, w)


@case("index_select_axis1")
def _():
    return (lambda g: [(randn(g, 5, 7, 3), D), (torch.tensor([6, 0, 6, 2, 2], dtype=torch.int64), C)],
            lambda x, i: torch.index_select(x, 1, i))


@case("concat_axis1")
def _():
    return (lambda g: [(randn(g, 3, 2, 5), D), (randn(g, 3, 3, 5), D), (randn(g, 3, 1, 5), D)],
            lambda a, b, c: torch.cat([a, b, c], dim=1))


@case("split_reorder")
def _():  # split (3, 7, 5) into 2, 3, 2 along axis 1; concat(p2, p0, p1^2)
    def fn(x):
        p = torch.split(x, [2, 3, 2], dim=1)
        return torch.cat([p[2], p[0], p[1].square()], dim=1)
    return lambda g: [(randn(g, 3, 7, 5), D)], fn


@case("cumsum_axis1")
def _():
    return lambda g: [(randn(g, 3, 7, 5), D)], lambda x: torch.cumsum(x, dim=1)


@case("where_broadcast3")
def _():  # cond (3, 1, 5), a (4, 5), b (5) -> (3, 4, 5); cond is a 0/1 float constant
    return (lambda g: [(mask01(g, 3, 1, 5), C), (randn(g, 4, 5), D), (randn(g, 5), D)],
            lambda c, a, b: torch.where(c != 0, a, b))


@case("masked_fill_broadcast")
def _():  # mask (5, 1) broadcasts to x (3, 5, 7)
    return (lambda g: [(randn(g, 3, 5, 7), D), (mask01(g, 5, 1), C)],
            lambda x, m: x.masked_fill(m != 0, -2.5))


# ---- composites ----
@case("mlp_cross_entropy")
def _():
    # x (7, 5) -> gelu(x W1 + b1) (7, 33) -> logits (7, 3); loss = -mean(logp[i, t_i]).
    # The C++ side gathers with index_select on the flattened log-probs.
    def make(g):
        return [(randn(g, 7, 5), D), (randn(g, 5, 33, scale=0.5), D), (randn(g, 33, scale=0.1), D),
                (randn(g, 33, 3, scale=0.3), D), (randn(g, 3, scale=0.1), D), (ids(g, 3, 7), C)]

    def fn(x, w1, b1, w2, b2, t):
        logits = F.gelu(x @ w1 + b1) @ w2 + b2
        logp = torch.log_softmax(logits, dim=-1)
        return -logp.gather(1, t.unsqueeze(1)).squeeze(1).mean()
    return make, fn


@case("layernorm")
def _():  # over the last axis of (5, 33), eps 1e-5
    def fn(x, gamma, beta):
        mu = x.mean(dim=-1, keepdim=True)
        xc = x - mu
        var = xc.square().mean(dim=-1, keepdim=True)
        return xc * torch.rsqrt(var + 1e-5) * gamma + beta
    return (lambda g: [(randn(g, 5, 33, scale=2.0), D), (randn(g, 33), D), (randn(g, 33), D)], fn)


@case("causal_attention")
def _():  # q, k, v (B=2, T=5, D=7); mask (T, T) is 1 above the diagonal
    def fn(q, k, v, m):
        s = (q @ k.transpose(-1, -2)) * (1.0 / 7 ** 0.5)
        s = s.masked_fill(m != 0, -1e9)
        return torch.softmax(s, dim=-1) @ v
    return (lambda g: [(randn(g, 2, 5, 7), D), (randn(g, 2, 5, 7), D), (randn(g, 2, 5, 7), D),
                       (torch.triu(torch.ones(5, 5, dtype=torch.float64), diagonal=1), C)], fn)


# ---- writing ----
def tensor_bytes(role, slot, t):
    t = t.detach().contiguous()
    if t.dtype == torch.float64:
        dtag, fmt = DTYPE_F64, "d"
    elif t.dtype == torch.int64:
        dtag, fmt = DTYPE_I64, "q"
    else:
        raise TypeError(f"unsupported dtype {t.dtype}")
    head = struct.pack("<BIBI", role, slot, dtag, t.dim())
    head += struct.pack(f"<{t.dim()}q", *t.shape)
    return head + struct.pack(f"<{t.numel()}{fmt}", *t.reshape(-1).tolist())


def f32_check(name, fn, inputs, want):
    """torch's own float32 forward must pass the C++ test's float32 tolerance."""
    x32 = [t.float() if t.is_floating_point() else t for t, _ in inputs]
    got = fn(*x32).double()
    err = (got - want).abs() - (F32_ATOL + F32_RTOL * want.abs())
    worst = err.max().item() if want.numel() else 0.0
    assert worst <= 0, f"{name}: torch float32 misses the float32 tolerance by {worst}"


def build_case(name, make, fn):
    assert name.replace("_", "").isalnum(), f"case name {name!r} is not a gtest name"
    g = torch.Generator().manual_seed(BASE_SEED + zlib.crc32(name.encode()))
    inputs = make(g)
    leaves = []
    for t, diff in inputs:
        leaves.append(t.clone().requires_grad_(diff and t.is_floating_point()))
    out = fn(*leaves)
    assert out.dtype == torch.float64, f"{name}: output dtype {out.dtype}"
    f32_check(name, fn, inputs, out.detach())
    blobs = [tensor_bytes(ROLE_INPUT, i, t) for i, (t, _) in enumerate(inputs)]
    blobs.append(tensor_bytes(ROLE_OUTPUT, 0, out))
    wrt = [i for i, leaf in enumerate(leaves) if leaf.requires_grad]
    if wrt:
        dout = randn(g, *out.shape)
        grads = torch.autograd.grad(out, [leaves[i] for i in wrt], dout)
        blobs.append(tensor_bytes(ROLE_DOUT, 0, dout))
        blobs += [tensor_bytes(ROLE_GRAD, i, gr) for i, gr in zip(wrt, grads)]
    nb = name.encode("utf-8")
    return struct.pack("<I", len(nb)) + nb + struct.pack("<I", len(blobs)) + b"".join(blobs)


def main():
    torch.manual_seed(BASE_SEED)
    names = [n for n, _, _ in CASES]
    assert len(set(names)) == len(names), "duplicate case names"
    body = b"".join(build_case(*c) for c in CASES)
    data = MAGIC + struct.pack("<II", VERSION, len(CASES)) + body + TRAILER
    with open(OUT_PATH + ".tmp", "wb") as f:
        f.write(data)
    os.replace(OUT_PATH + ".tmp", OUT_PATH)
    print(f"wrote {OUT_PATH}: {len(CASES)} cases, {len(data)} bytes (torch {torch.__version__})")
    for n in names:
        print("  " + n)


if __name__ == "__main__":
    sys.exit(main())
