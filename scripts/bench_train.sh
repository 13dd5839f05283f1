#!/usr/bin/env bash
# Training throughput against PyTorch: builds darkformer_bench_train (Release), then trains
# the same model (configs/small.json, or the built-in small model when it does not exist)
# with darkformer and with Debian's PyTorch (bench/torch_train.py, /usr/bin/python3) on the
# same batch and sequence length, one process per side and thread setting so peak RSS does
# not mix, and prints one table: side | threads | median step ms | tokens/s | peak RSS MB,
# then darkformer / PyTorch for tokens/s (target >= 1.5) and peak RSS (target <= 1.0), each
# side at its best thread setting, with pass/FAIL.
#
# Thread settings tried (--threads L): darkformer with OMP_NUM_THREADS=t for t in L;
# PyTorch with torch.set_num_threads(t) x OPENBLAS_NUM_THREADS=b for t, b in L (Debian's
# torch runs its matrix products in OpenBLAS's own pthread pool, beside its OpenMP pool;
# when both are threaded, OMP_WAIT_POLICY=passive so idle OpenMP threads do not spin).
# OpenBLAS picks its kernels for the CPU (OPENBLAS_CORETYPE is unset for PyTorch unless
# --openblas-coretype says otherwise: a forced older core, e.g. Haswell on an AVX-512 CPU,
# would slow PyTorch down and flatter us).
#
# Env: BUILD_DIR (default build), JOBS (parallel build jobs, default 2).
# Exit: 0 when both sides ran (a missed target is reported, not fatal, unless --strict),
# 1 when a side failed (or --strict and a target is missed), 2 on a bad command line.
set -euo pipefail
cd "$(dirname "$0")/.."

steps=20
warmup=3
threads="1 2"
config=""
coretype="auto"
json_out=""
strict=0
usage() {
  cat << 'EOF'
usage: scripts/bench_train.sh [flags]
Trains the same model with darkformer and PyTorch and compares tokens/s and peak memory.

  --steps N       timed steps per run (default 20; 5 with --quick)
  --warmup N      untimed steps first (default 3; 1 with --quick)
  --quick         short runs, for a smoke test
  --threads "L"   thread counts to try (default "1 2"): darkformer t for t in L,
                  PyTorch torch threads t x OpenBLAS threads b for t, b in L; each side
                  is compared at its best
  --openblas-coretype C
                  PyTorch's OpenBLAS kernels: auto (default; OpenBLAS detects the CPU),
                  env (keep OPENBLAS_CORETYPE from the environment) or a core name
  --config PATH   run config (default: configs/small.json, else the built-in small model)
  --json PATH     also write every run's result as JSON lines to PATH
  --strict        exit 1 when a target is missed
  --help          print this message

Env: BUILD_DIR (default build), JOBS (build jobs, default 2). The machine should be
otherwise idle: the load average is printed before and after.
EOF
}
quick=0
steps_set=0
warmup_set=0
while [[ $# -gt 0 ]]; do
  case "$1" in
    --steps) steps="${2:?--steps needs a value}"; steps_set=1; shift 2 ;;
    --warmup) warmup="${2:?--warmup needs a value}"; warmup_set=1; shift 2 ;;
    --quick) quick=1; shift ;;
    --threads) threads="${2:?--threads needs a value}"; shift 2 ;;
    --config) config="${2:?--config needs a value}"; shift 2 ;;
    --openblas-coretype) coretype="${2:?--openblas-coretype needs a value}"; shift 2 ;;
    --json) json_out="${2:?--json needs a value}"; shift 2 ;;
    --strict) strict=1; shift ;;
    -h | --help) usage; exit 0 ;;
    *) echo "bench_train.sh: unknown flag '$1'" >&2; usage >&2; exit 2 ;;
  esac
done
if [[ $quick == 1 ]]; then
  [[ $steps_set == 1 ]] || steps=5
  [[ $warmup_set == 1 ]] || warmup=1
fi
[[ "$steps" =~ ^[1-9][0-9]*$ ]] || { echo "bench_train.sh: --steps wants a positive integer, got '$steps'" >&2; exit 2; }
[[ "$warmup" =~ ^[0-9]+$ ]] || { echo "bench_train.sh: --warmup wants an integer >= 0, got '$warmup'" >&2; exit 2; }
for t in $threads; do
  [[ "$t" =~ ^[1-9][0-9]*$ ]] || { echo "bench_train.sh: --threads wants positive integers, got '$t'" >&2; exit 2; }
done

# ---- PyTorch (Debian's, with the pthread OpenBLAS) ----
if ! /usr/bin/python3 -c "import torch" 2> /dev/null || ! dpkg -s libopenblas0-pthread > /dev/null 2>&1; then
  echo "installing python3-torch libopenblas0-pthread"
  sudo_cmd=""
  [[ $(id -u) == 0 ]] || sudo_cmd="sudo"
  $sudo_cmd apt-get install -y python3-torch libopenblas0-pthread > /dev/null
fi

# ---- build ----
build_dir="${BUILD_DIR:-build}"
cmake -S . -B "$build_dir" -DCMAKE_BUILD_TYPE=Release -DDARK_BUILD_BENCH=ON > /dev/null
cmake --build "$build_dir" -j "${JOBS:-2}" --target darkformer_bench_train > /dev/null
bench="$build_dir/bench/darkformer_bench_train"
config_args=()
[[ -n "$config" ]] && config_args=(--config "$config")
model_json="$("$bench" "${config_args[@]}" --print-model)"

cpu="$(lscpu 2> /dev/null | sed -n 's/^Model name: *//p' | head -n 1)"
echo "CPU: ${cpu:-unknown}, $(nproc) cores; load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "model: $model_json"
echo "steps: $warmup warm-up + $steps timed per run; threads tried: $threads; PyTorch OpenBLAS core: $coretype (env OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-unset})"
echo

results="$(mktemp)"
trap 'rm -f "$results"' EXIT
failed=0
# Sides alternate per thread count, so background load changes hit both alike.
for t in $threads; do
  if ! OMP_NUM_THREADS="$t" "$bench" "${config_args[@]}" --threads "$t" --steps "$steps" --warmup "$warmup" >> "$results"; then
    echo "darkformer with $t threads failed" >&2
    failed=1
  fi
  for b in $threads; do
    # Both pools threaded: PyTorch's idle OpenMP threads would spin against OpenBLAS's.
    wait_policy=default
    [[ $t -gt 1 && $b -gt 1 ]] && wait_policy=passive
    if ! /usr/bin/python3 bench/torch_train.py --model-json "$model_json" --threads "$t" --blas-threads "$b" \
        --omp-wait-policy "$wait_policy" --openblas-coretype "$coretype" --steps "$steps" --warmup "$warmup" >> "$results"; then
      echo "pytorch with $t threads (OpenBLAS $b) failed" >&2
      failed=1
    fi
  done
done
echo
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
[[ -n "$json_out" ]] && cp "$results" "$json_out"

set +e
/usr/bin/python3 - "$results" "$strict" "$failed" << 'EOF'
import json, sys

rows = [json.loads(line) for line in open(sys.argv[1]) if line.strip()]
strict, failed = sys.argv[2] == "1", sys.argv[3] == "1"
header = ["side", "threads", "median step ms", "[min..max] ms", "tokens/s", "peak RSS MB", "RSS growth MB", "allocator peak MB"]
cells = []
for r in rows:
    threads = str(r["threads"]) if "blas_threads" not in r else f'{r["threads"]} + BLAS {r["blas_threads"]}'
    if r.get("omp_wait_policy", "default") != "default":
        threads += f' ({r["omp_wait_policy"]})'
    side = r["side"] if "blas_core" not in r else f'pytorch (OpenBLAS {r["blas_core"]})'
    cells.append([side, threads, f'{r["median_step_ms"]:.1f}',
                  f'[{r["min_step_ms"]:.0f}..{r["max_step_ms"]:.0f}]', f'{r["tokens_per_s"]:.0f}',
                  f'{r["peak_rss_mb"]:.0f}', f'{r["peak_rss_mb"] - r["base_rss_mb"]:.0f}',
                  f'{r["alloc_peak_mb"]:.0f}' if "alloc_peak_mb" in r else "-"])
width = [max(len(h), *(len(c[i]) for c in cells)) if cells else len(h) for i, h in enumerate(header)]
line = lambda row: " | ".join(v.ljust(w) if i == 0 else v.rjust(w) for i, (v, w) in enumerate(zip(row, width)))
print(line(header))
print("-" * len(line(header)))
for c in cells:
    print(line(c))

best = {}
for r in rows:
    if r["side"] not in best or r["tokens_per_s"] > best[r["side"]]["tokens_per_s"]:
        best[r["side"]] = r
if "darkformer" not in best or "pytorch" not in best:
    print("\na side did not run: no ratio")
    sys.exit(1)
d, p = best["darkformer"], best["pytorch"]
speed = d["tokens_per_s"] / p["tokens_per_s"]
memory = d["peak_rss_mb"] / p["peak_rss_mb"]
print()
print(f'darkformer ({d["threads"]} threads) / PyTorch ({p["threads"]} threads + OpenBLAS {p.get("blas_threads", "?")}),'
      ' each at its best thread setting:')
checks = [("tokens/s", speed, ">= 1.50", speed >= 1.5), ("peak RSS", memory, "<= 1.00", memory <= 1.0)]
print(" | ".join(["metric  ", "ratio", "target ", "pass/FAIL"]))
for name, ratio, target, ok in checks:
    print(f"{name:<8} | {ratio:5.2f} | {target} | {'pass' if ok else 'FAIL'}")
all_ok = all(ok for *_, ok in checks)
sys.exit(1 if failed or (strict and not all_ok) else 0)
EOF
