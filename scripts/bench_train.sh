#!/usr/bin/env bash
# Training throughput against PyTorch: builds darkformer_bench_train (Release), then trains
# the same model (configs/small.json, or the built-in small model when it does not exist)
# with darkformer and with PyTorch (bench/torch_train.py) on the same batch and sequence
# length, one process per side and thread setting so peak RSS does not mix, and prints one
# table: side | threads | median step ms | tokens/s | peak RSS MB, then darkformer /
# PyTorch for tokens/s and peak memory, each side at its best thread setting.
#
# The PyTorch peer is the latest torch from PyPI (scripts/torch-venv.sh keeps it in
# cache/venv-torch, CPU use only) at its best: scaled_dot_product_attention, fused AdamW,
# once eager and once with torch.compile (the headline: darkformer / PyTorch + compile,
# targets tokens/s >= 1.3x and peak memory <= 0.7x). Debian's python3-torch 1.13 (explicit
# matmul attention, foreach AdamW, no compile) is an extra row with --torch both.
#
# Thread settings tried (--threads L): darkformer with OMP_NUM_THREADS=t for t in L; PyPI
# torch with torch.set_num_threads(t) (its matrix products run in oneDNN / MKL inside the
# same OpenMP pool); Debian's torch with torch.set_num_threads(t) x OPENBLAS_NUM_THREADS=b
# for t, b in L (it runs its matrix products in OpenBLAS's own pthread pool, beside its
# OpenMP pool; when both are threaded, OMP_WAIT_POLICY=passive so idle OpenMP threads do not
# spin). OpenBLAS picks its kernels for the CPU (OPENBLAS_CORETYPE is unset for PyTorch
# unless --openblas-coretype says otherwise: a forced older core, e.g. Haswell on an AVX-512
# CPU, would slow PyTorch down and flatter us).
#
# Memory: peak RSS of the whole process. For PyTorch the ratio uses the peak over its timed
# steps (after warm-up, so torch.compile's compiler is not counted against it) less the
# resident pages of the CUDA libraries the PyPI wheel loads even for CPU use (~250 MB a
# CPU-only build would not have); both figures are in the table.
#
# Env: BUILD_DIR (default build), JOBS (parallel build jobs, default 2), SKIP_BUILD=1 (use
# the existing $BUILD_DIR/bench/darkformer_bench_train, e.g. while someone else builds).
# Exit: 0 when every side ran (a missed target is reported, not fatal, unless --strict),
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
torch_sel="pypi"
compile=1
wait_policy="env"
usage() {
  cat << 'EOF'
usage: scripts/bench_train.sh [flags]
Trains the same model with darkformer and PyTorch and compares tokens/s and peak memory.

  --steps N       timed steps per run (default 20; 5 with --quick)
  --warmup N      untimed steps first (default 3; 2 with --quick); torch.compile
                  compiles in the first one (its time is reported, never timed)
  --quick         short runs, for a smoke test
  --threads "L"   thread counts to try (default "1 2"): darkformer and PyPI torch t for
                  t in L, Debian's torch threads t x OpenBLAS threads b for t, b in L; each
                  side is compared at its best
  --torch WHICH   the PyTorch peer: pypi (default: the latest torch from PyPI in
                  cache/venv-torch, created when missing; eager and torch.compile),
                  debian (Debian's python3-torch 1.13, installed when missing), both
                  (PyPI, plus Debian's as an extra row), none (darkformer only)
  --no-pypi       the same as --torch debian
  --no-compile    PyPI torch eager only (no torch.compile run)
  --omp-wait-policy P
                  OMP_WAIT_POLICY for darkformer and PyPI torch: env (default: keep the
                  environment's, normally unset = spin then sleep), passive or active.
                  On cores shared with other work, spinning threads collapse times;
                  use passive there (Debian's torch: passive when both pools are threaded)
  --openblas-coretype C
                  Debian torch's OpenBLAS kernels: auto (default; OpenBLAS detects the
                  CPU), env (keep OPENBLAS_CORETYPE from the environment) or a core name
  --config PATH   run config (default: configs/small.json, else the built-in small model)
  --json PATH     also write every run's result as JSON lines to PATH
  --strict        exit 1 when a target is missed
  --help          print this message

Env: BUILD_DIR (default build), JOBS (build jobs, default 2), SKIP_BUILD=1 (do not
build; use the existing darkformer_bench_train), TORCH_VENV (default cache/venv-torch).
The machine should be otherwise idle: the load average is printed before and after.
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
    --torch) torch_sel="${2:?--torch needs a value}"; shift 2 ;;
    --no-pypi) torch_sel=debian; shift ;;
    --no-compile) compile=0; shift ;;
    --omp-wait-policy) wait_policy="${2:?--omp-wait-policy needs a value}"; shift 2 ;;
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
  # Two: the first compiles (torch.compile), the second settles the caches.
  [[ $warmup_set == 1 ]] || warmup=2
fi
[[ "$steps" =~ ^[1-9][0-9]*$ ]] || { echo "bench_train.sh: --steps wants a positive integer, got '$steps'" >&2; exit 2; }
[[ "$warmup" =~ ^[0-9]+$ ]] || { echo "bench_train.sh: --warmup wants an integer >= 0, got '$warmup'" >&2; exit 2; }
[[ -n "${threads// /}" ]] || { echo "bench_train.sh: --threads wants at least one thread count" >&2; exit 2; }
for t in $threads; do
  [[ "$t" =~ ^[1-9][0-9]*$ ]] || { echo "bench_train.sh: --threads wants positive integers, got '$t'" >&2; exit 2; }
done
case "$torch_sel" in
  pypi | debian | both | none) ;;
  *) echo "bench_train.sh: --torch wants pypi, debian, both or none, got '$torch_sel'" >&2; exit 2 ;;
esac
case "$wait_policy" in
  passive | active) export OMP_WAIT_POLICY="${wait_policy^^}" ;;
  env) ;;
  *) echo "bench_train.sh: --omp-wait-policy wants env, passive or active, got '$wait_policy'" >&2; exit 2 ;;
esac
if [[ $compile == 1 && $warmup -lt 1 && $torch_sel =~ ^(pypi|both)$ ]]; then
  echo "bench_train.sh: torch.compile needs --warmup >= 1 (the first step compiles), or use --no-compile" >&2
  exit 2
fi
pypi=0
debian=0
[[ $torch_sel == pypi || $torch_sel == both ]] && pypi=1
[[ $torch_sel == debian || $torch_sel == both ]] && debian=1

failed=0
# ---- PyTorch from PyPI (a virtual environment under cache/) ----
torch_python=""
if [[ $pypi == 1 ]]; then
  if ! torch_python="$(scripts/torch-venv.sh)"; then
    echo "bench_train.sh: no PyPI torch (scripts/torch-venv.sh failed); its rows are missing" >&2
    failed=1
    pypi=0
  fi
fi
# ---- PyTorch (Debian's, with the pthread OpenBLAS) ----
if [[ $debian == 1 ]] && { ! /usr/bin/python3 -c "import torch" 2> /dev/null || ! dpkg -s libopenblas0-pthread > /dev/null 2>&1; }; then
  echo "installing python3-torch libopenblas0-pthread"
  sudo_cmd=""
  [[ $(id -u) == 0 ]] || sudo_cmd="sudo"
  $sudo_cmd apt-get install -y python3-torch libopenblas0-pthread > /dev/null
fi

# ---- build ----
source scripts/bench-build.sh
bench_binary bench_train.sh darkformer_bench_train
config_args=()
[[ -n "$config" ]] && config_args=(--config "$config")
model_json="$("$bench" "${config_args[@]}" --print-model)"

# The CPU's model and vector extensions belong next to the figures: PyTorch's oneDNN and
# our kernels both pick code paths by them (AVX-512, bf16 dot products, AMX tiles).
cpu="$(lscpu 2> /dev/null | sed -n 's/^Model name: *//p' | head -n 1)"
cpu_flags="$(grep -m 1 '^flags' /proc/cpuinfo 2> /dev/null || true)"
isa=""
for f in avx2 avx512f avx512_bf16 amx_tile amx_bf16; do
  if [[ " $cpu_flags " == *" $f "* ]]; then isa+=" $f"; else isa+=" no-$f"; fi
done
echo "CPU: ${cpu:-unknown}, $(nproc) cores;${isa}; load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "model: $model_json"
echo "steps: $warmup warm-up + $steps timed per run; threads tried: $threads; OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-unset}"
[[ $pypi == 1 ]] && echo "PyPI torch: $torch_python ($("$torch_python" -c 'import torch; print(torch.__version__)' 2> /dev/null))"
[[ $debian == 1 ]] && echo "Debian torch: /usr/bin/python3 ($(/usr/bin/python3 -c 'import torch; print(torch.__version__)' 2> /dev/null));" \
  "OpenBLAS core: $coretype (env OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-unset})"
echo

results="$(mktemp)"
trap 'rm -f "$results"' EXIT
py_wait_policy="${wait_policy/env/default}"
# Sides alternate per thread count, so background load changes hit all alike.
for t in $threads; do
  if ! OMP_NUM_THREADS="$t" "$bench" "${config_args[@]}" --threads "$t" --steps "$steps" --warmup "$warmup" >> "$results"; then
    echo "darkformer with $t threads failed" >&2
    failed=1
  fi
  if [[ $pypi == 1 ]]; then
    modes=(eager)
    [[ $compile == 1 ]] && modes+=(compile)
    for mode in "${modes[@]}"; do
      mode_args=()
      # Cold: compile_s is what a fresh machine pays, not a hit in inductor's cache.
      [[ $mode == compile ]] && mode_args=(--compile --cold-compile)
      if ! "$torch_python" bench/torch_train.py --model-json "$model_json" --threads "$t" \
          --omp-wait-policy "$py_wait_policy" --steps "$steps" --warmup "$warmup" "${mode_args[@]}" >> "$results"; then
        echo "PyPI pytorch $mode with $t threads failed" >&2
        failed=1
      fi
    done
  fi
  if [[ $debian == 1 ]]; then
    for b in $threads; do
      # Both pools threaded: PyTorch's idle OpenMP threads would spin against OpenBLAS's.
      policy="$py_wait_policy"
      [[ $policy == default && $t -gt 1 && $b -gt 1 ]] && policy=passive
      if ! /usr/bin/python3 bench/torch_train.py --model-json "$model_json" --threads "$t" --blas-threads "$b" \
          --omp-wait-policy "$policy" --openblas-coretype "$coretype" --steps "$steps" --warmup "$warmup" >> "$results"; then
        echo "Debian pytorch with $t threads (OpenBLAS $b) failed" >&2
        failed=1
      fi
    done
  fi
done
echo
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
[[ -n "$json_out" ]] && cp "$results" "$json_out"

set +e
python3 - "$results" "$strict" "$failed" << 'EOF'
import json, sys

rows = [json.loads(line) for line in open(sys.argv[1]) if line.strip()]
strict, failed = sys.argv[2] == "1", sys.argv[3] == "1"


def side_of(r):
    """The table's name for a run's side: darkformer, or PyTorch <version> <mode> (<where from>)."""
    if r["side"] != "pytorch":
        return r["side"]
    build = {"pypi": "PyPI", "debian": "Debian"}.get(r.get("torch_build"), r.get("torch_build", "?"))
    return f'PyTorch {r["torch"]} {r.get("mode", "eager")} ({build})'


def torch_peak(r):
    """PyTorch's peak RSS for the ratio: the timed steps' peak (no compiler), less the CUDA libraries."""
    peak = r.get("timed_peak_rss_mb") or r["peak_rss_mb"]
    return peak - (r.get("cuda_lib_rss_mb") or 0.0)


header = ["side", "threads", "median step ms", "[min..max] ms", "tokens/s", "peak RSS MB", "RSS growth MB",
          "timed-steps peak MB", "CUDA libs MB", "allocator peak MB", "allocator held MB"]
cells = []
for r in rows:
    threads = str(r["threads"]) if r.get("blas_core", "none") == "none" else f'{r["threads"]} + BLAS {r["blas_threads"]}'
    if r.get("omp_wait_policy", "default") != "default":
        threads += f' ({r["omp_wait_policy"]})'
    side = side_of(r) + (f' OpenBLAS {r["blas_core"]}' if r.get("blas_core", "none") != "none" else "")
    cells.append([side, threads, f'{r["median_step_ms"]:.1f}',
                  f'[{r["min_step_ms"]:.0f}..{r["max_step_ms"]:.0f}]', f'{r["tokens_per_s"]:.0f}',
                  f'{r["peak_rss_mb"]:.0f}', f'{r["peak_rss_mb"] - r["base_rss_mb"]:.0f}',
                  f'{r["timed_peak_rss_mb"]:.0f}' if r.get("timed_peak_rss_mb") else "-",
                  f'{r["cuda_lib_rss_mb"]:.0f}' if r.get("cuda_lib_rss_mb") else "-",
                  f'{r["alloc_peak_mb"]:.0f}' if "alloc_peak_mb" in r else "-",
                  f'{r["alloc_held_mb"]:.0f}' if "alloc_held_mb" in r else "-"])
width = [max(len(h), *(len(c[i]) for c in cells)) if cells else len(h) for i, h in enumerate(header)]
line = lambda row: " | ".join(v.ljust(w) if i == 0 else v.rjust(w) for i, (v, w) in enumerate(zip(row, width)))
print(line(header))
print("-" * len(line(header)))
for c in cells:
    print(line(c))

# How each PyTorch ran, once per side (compile time per thread setting).
seen = {}
for r in rows:
    if r["side"] == "pytorch":
        seen.setdefault(side_of(r), []).append(r)
if seen:
    print()
for name, rs in seen.items():
    r = rs[0]
    how = f'attention {r.get("attention_impl", "matmul")}, AdamW {r.get("optimizer_impl", "?")}'
    if r.get("mode") == "compile":
        times = ", ".join(f'{x["compile_s"]:.0f} s ({x["threads"]} thr)' for x in rs if x.get("compile_s") is not None)
        how += (f', torch.compile of the loss function (mode {r.get("compile_mode", "default")}), '
                f'{"cold " if r.get("cold_compile") else ""}compile time {times} (in warm-up, not timed)')
    print(f'{name}: {r.get("python", "?")}; {how}')

best = {}
for r in rows:
    s = side_of(r)
    if s not in best or r["tokens_per_s"] > best[s]["tokens_per_s"]:
        best[s] = r
if "darkformer" not in best:
    print("\ndarkformer did not run: no ratio")
    sys.exit(1)
d = best["darkformer"]


def peer(build, mode):
    found = [r for s, r in best.items() if r["side"] == "pytorch" and r.get("torch_build") == build and r.get("mode", "eager") == mode]
    return found[0] if found else None


peers = [(peer("pypi", "compile"), True), (peer("pypi", "eager"), False), (peer("debian", "eager"), False)]
peers = [(p, h) for p, h in peers if p is not None]
all_ok = True
print()
if not peers:
    print("no PyTorch run (--torch none, or every PyTorch run failed): no ratio")
    sys.exit(1 if failed or strict else 0)
print("darkformer / PyTorch, each at its best thread setting (tokens/s: higher is better for darkformer; peak RSS: "
      "lower is). PyTorch's peak RSS here: its timed steps' peak less its CUDA libraries' pages.")
vs = [side_of(p) + (" (headline)" if h else "") for p, h in peers]
head = ["versus", "threads", "tokens/s ratio", "target", "peak RSS ratio", "target", "pass/FAIL"]
table = []
for (p, headline), name in zip(peers, vs):
    speed = d["tokens_per_s"] / p["tokens_per_s"]
    memory = d["peak_rss_mb"] / torch_peak(p)
    thr = f'{d["threads"]} / {p["threads"]}' + (f'+{p["blas_threads"]}' if p.get("blas_core", "none") != "none" else "")
    if headline:
        ok = speed >= 1.3 and memory <= 0.7
        all_ok = all_ok and ok
        verdict = "pass" if ok else "FAIL" + ("" if speed >= 1.3 else " (speed)") + ("" if memory <= 0.7 else " (memory)")
        table.append([name, thr, f"{speed:.2f}", ">= 1.30", f"{memory:.2f}", "<= 0.70", verdict])
    else:
        table.append([name, thr, f"{speed:.2f}", "-", f"{memory:.2f}", "-", "-"])
width = [max(len(h), *(len(row[i]) for row in table)) if table else len(h) for i, h in enumerate(head)]
print(line(head))
for row in table:
    print(line(row))
if peer("pypi", "compile") is None:
    print("no PyPI PyTorch + compile run (--no-compile, --torch debian, or it failed): no headline verdict")
    all_ok = False if strict else all_ok
sys.exit(1 if failed or (strict and not all_ok) else 0)
EOF
