#!/usr/bin/env bash
# CPU smoke test of bench/torch_gpu.py (the PyTorch peer of scripts/bench_gpu.sh), so that a
# crash in it shows up in CI instead of on a GPU machine: runs its train mode for one step of a
# tiny model (the keys of darkformer_bench_train --print-model; bf16 autocast with grouped-query
# heads and a tied head, then f32 with full heads, an untied head and GeGLU) and its attention
# mode at tiny lengths, all with --device cpu, and checks that each prints JSON with positive
# timings. Where the python has no GPU it also checks that the default --device cuda says
# "no GPU" and exits 1.
#
#   tests/torch_gpu_smoke.sh REPO_ROOT
#
# Python: REPO_ROOT/cache/venv-torch/bin/python (scripts/torch-venv.sh makes it), else python3;
# the first with torch >= 2.0 (scaled_dot_product_attention) runs it.
# Env: TORCH_GPU_SMOKE_COMPILE=1 also runs the train mode with --compile. Off by default: with
# a cold inductor cache, torch.compile on the CPU compiles C++ for about 1.5 minutes on 2 cores
# (about 10 s more than eager with a warm cache), past this test's budget of about a minute.
# Exit: 0 passed, 77 skipped (no PyTorch >= 2), 1 failed (the output is shown), 2 bad usage.
set -euo pipefail

[[ $# == 1 ]] || { echo "usage: tests/torch_gpu_smoke.sh REPO_ROOT" >&2; exit 2; }
root="$1"
script="$root/bench/torch_gpu.py"
[[ -f "$script" ]] || { echo "torch_gpu_smoke: $script not found" >&2; exit 2; }

# ---- a python with torch >= 2
py=""
tried=()
for cand in "$root/cache/venv-torch/bin/python" python3; do
  command -v "$cand" > /dev/null 2>&1 || { tried+=("$cand (absent)"); continue; }
  if version="$("$cand" -c '
import sys
import torch
import torch.nn.functional as F
major = int(torch.__version__.split(".")[0])
print(torch.__version__)
sys.exit(0 if major >= 2 and hasattr(F, "scaled_dot_product_attention") else 3)
' 2> /dev/null)"; then
    py="$cand"
    break
  fi
  if [[ -n "$version" ]]; then tried+=("$cand (torch $version)"); else tried+=("$cand (no torch)"); fi
done
if [[ -z "$py" ]]; then
  list="$(IFS=','; echo "${tried[*]}")"
  echo "SKIP: no PyTorch >= 2 (install it with scripts/torch-venv.sh); tried: ${list//,/, }"
  exit 77
fi
echo "torch_gpu_smoke: $py (torch $version)"

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
failures=0

# run NAME TIMEOUT_S ARGS...: runs torch_gpu.py, stdout to $tmp/NAME.out, stderr to $tmp/NAME.err.
run() {
  local name="$1" limit="$2"
  shift 2
  local t0=$SECONDS rc=0
  timeout "$limit" "$py" "$script" "$@" > "$tmp/$name.out" 2> "$tmp/$name.err" || rc=$?
  echo "torch_gpu_smoke: $name: exit $rc in $((SECONDS - t0)) s"
  return $rc
}

show() {
  echo "---- $1: command: torch_gpu.py ${*:2}"
  echo "---- stdout:"
  cat "$tmp/$1.out"
  echo "---- stderr:"
  tail -n 40 "$tmp/$1.err"
  echo "----"
}

# check NAME KIND: the JSON lines of $tmp/NAME.out are what KIND (train / attention) prints.
check() {
  "$py" - "$tmp/$1.out" "$2" << 'EOF'
import json, math, sys
path, kind = sys.argv[1], sys.argv[2]
rows = [json.loads(line) for line in open(path) if line.strip().startswith("{")]
def positive(r, key):
    v = r.get(key)
    assert isinstance(v, (int, float)) and math.isfinite(v) and v > 0, f"{key} = {v!r} is not a positive number"
assert rows, "no JSON line on stdout"
for r in rows:
    assert r.get("side") == "torch", f"side = {r.get('side')!r}"
if kind == "train":
    assert len(rows) == 1, f"{len(rows)} JSON lines, expected 1"
    r = rows[0]
    want = {"side", "mode", "torch", "precision", "steps", "median_step_ms", "tokens_per_s", "peak_mem_mib",
            "parameters", "first_loss", "last_loss"}
    assert set(r) == want, f"keys {sorted(r)}, expected {sorted(want)}"
    for key in ("median_step_ms", "tokens_per_s", "parameters", "first_loss", "last_loss"):
        positive(r, key)
else:
    for r in rows:
        assert "skipped" not in r, f"skipped: {r}"
        want = {"side", "kind", "d", "len", "batch", "heads", "dtype", "ms", "tflops", "peak_mib"}
        assert set(r) == want, f"keys {sorted(r)}, expected {sorted(want)}"
        for key in ("ms", "tflops"):
            positive(r, key)
    got = sorted((r["d"], r["len"]) for r in rows)
    assert got == [(16, 32), (16, 64), (32, 32), (32, 64)], f"rows for (d, len) {got}"
print(f"  ok: {len(rows)} JSON line(s)" + "".join(
    f"; {r.get('mode', r.get('kind'))} {r.get('precision', r.get('dtype'))} "
    + (f"{r['tokens_per_s']:.0f} tokens/s, loss {r['first_loss']:.3f}" if kind == "train" else f"d {r['d']} L {r['len']} {r['ms']:.3f} ms")
    for r in rows))
EOF
}

# step NAME KIND TIMEOUT_S ARGS...: run + check; a failure shows the output and is counted.
step() {
  local name="$1" kind="$2" limit="$3"
  shift 3
  if run "$name" "$limit" "$@" && check "$name" "$kind"; then
    return 0
  fi
  show "$name" "$@"
  failures=$((failures + 1))
}

# The keys darkformer_bench_train --print-model prints (bench/bench_train.cpp), tiny values.
# batch_size 2: the targets batch[:, 1:] are then not contiguous (the view() crash on the H200).
model() {  # precision n_kv_heads tie_embeddings mlp
  cat << EOF
{"vocab_size": 96, "precision": "$1", "d_model": 32, "n_layers": 2, "n_heads": 4, "n_kv_heads": $2,
 "d_ff": 64, "mlp": "$4", "rope_theta": 10000.0, "norm_eps": 1e-05, "tie_embeddings": $3, "init_std": 0.02,
 "attention": "softmax", "batch_size": 2, "seq_len": 16, "grad_accum": 1, "optimizer": "adamw", "lr": 0.0003,
 "betas": [0.9, 0.95], "eps": 1e-08, "weight_decay": 0.1, "no_decay": ["*norm*", "*embed_tokens*", "*feature_map*"],
 "grad_clip": 1.0, "seed": 0}
EOF
}
model bf16 2 true swiglu > "$tmp/bf16.json"
model f32 4 false geglu > "$tmp/f32.json"

step train-bf16 train 120 train --device cpu --model-json "@$tmp/bf16.json" --steps 1 --warmup 0
step train-f32 train 120 train --device cpu --model-json "$(cat "$tmp/f32.json")" --steps 2 --warmup 1
step attention attention 120 attention --device cpu --lens 32,64 --dims 16,32 --tokens 128 --heads 2 \
  --warmup 1 --reps 1 --rounds 1
if [[ "${TORCH_GPU_SMOKE_COMPILE:-0}" == 1 ]]; then
  step train-compile train 600 train --device cpu --compile --model-json "@$tmp/bf16.json" --steps 1 --warmup 1
else
  echo "torch_gpu_smoke: train --compile not run (a cold torch.compile on the CPU takes about 1.5 min on" \
    "2 cores; TORCH_GPU_SMOKE_COMPILE=1 runs it)"
fi

# Without a GPU the default --device cuda must say so and exit 1 (not crash, not run on the CPU).
if "$py" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)' 2> /dev/null; then
  echo "torch_gpu_smoke: this python sees a GPU: the no-GPU exit is not checked"
else
  rc=0
  run no-gpu 60 attention --lens 32 --dims 16 --tokens 32 || rc=$?
  if [[ $rc == 1 ]] && grep -q "no GPU" "$tmp/no-gpu.err" && ! grep -q . "$tmp/no-gpu.out"; then
    echo "  ok: --device cuda without a GPU: 'no GPU', exit 1"
  else
    echo "torch_gpu_smoke: --device cuda without a GPU: expected 'no GPU' on stderr, nothing on stdout and exit 1"
    show no-gpu attention --lens 32 --dims 16 --tokens 32
    failures=$((failures + 1))
  fi
fi

if [[ $failures -gt 0 ]]; then
  echo "torch_gpu_smoke: FAILED ($failures check(s))"
  exit 1
fi
echo "torch_gpu_smoke: passed"
