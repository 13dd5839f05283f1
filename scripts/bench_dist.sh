#!/usr/bin/env bash
# Distributed benchmarks, one section after another, each under `mpirun -np N`:
#   allreduce  all-reduce bandwidth of darkformer's mpi communicator against raw
#              MPI_Allreduce on the same buffers (bench/bench_allreduce.cpp), 1 KiB .. 256 MiB,
#              target ours / MPI >= 0.9 from 1 MiB.
#   train      configs/small.json (--config) trained by `darkformer train` on N ranks x 1
#              thread against one process x N threads with N times the grad_accum (the same
#              global batch): median step time, global tokens/s and the exposed communication
#              (comm_wait_ms: how long rank 0 waits for the gradient all-reduces after its
#              backward ended), target <= 5% of the step. Medians over the steps after the
#              first 3; tokens/s = global tokens per step / median step time.
# Builds what the sections need (Release, reusing build/), prints each section's table and
# saves it, with its JSON, under cache/bench/dist-<date>/ (ignored by git).
#
# Adding a section: write a function section_NAME that runs its benchmark through
# run_mpi (below) and writes into "$out_dir", add its build target to `targets` and NAME to
# `sections`; --only NAME then runs it alone.
#
# Env: BUILD_DIR (default build), JOBS (parallel build jobs, default 2).
# Exit: 0 when every section ran and validated (a missed target is reported, not fatal,
# unless --strict), 1 when a section failed (or --strict and a target is missed), 2 on a bad
# command line.
set -euo pipefail
cd "$(dirname "$0")/.."

sections=(allreduce train)
targets=(darkformer_bench_allreduce darkformer)
np=2
only=""
quick=0
strict=0
out_dir=""
config="configs/small.json"
steps=30
accum=1
usage() {
  cat << 'EOF'
usage: scripts/bench_dist.sh [flags]
Distributed benchmarks under mpirun; sections: allreduce, train.

  --np N         ranks (default 2; oversubscribed when above the core count)
  --only NAME    run one section only
  --quick        short runs, for a smoke test
  --config PATH  run config of the train section (default configs/small.json)
  --steps N      training steps per run of the train section (default 30; 8 with --quick)
  --accum G      per-rank grad_accum of the train section (default 1); the one process
                 uses N x G
  --out-dir DIR  tables and JSON (default cache/bench/dist-<date>)
  --strict       exit 1 when a target is missed
  --help         print this message

Env: BUILD_DIR (default build), JOBS (build jobs, default 2). The machine should be
otherwise idle: the load average is printed before and after each section.
EOF
}
while [[ $# -gt 0 ]]; do
  case "$1" in
    --np) np="${2:?--np needs a value}"; shift 2 ;;
    --only) only="${2:?--only needs a value}"; shift 2 ;;
    --quick) quick=1; shift ;;
    --out-dir) out_dir="${2:?--out-dir needs a value}"; shift 2 ;;
    --config) config="${2:?--config needs a value}"; shift 2 ;;
    --steps) steps="${2:?--steps needs a value}"; shift 2 ;;
    --accum) accum="${2:?--accum needs a value}"; shift 2 ;;
    --strict) strict=1; shift ;;
    -h | --help) usage; exit 0 ;;
    *) echo "bench_dist.sh: unknown flag '$1'" >&2; usage >&2; exit 2 ;;
  esac
done
[[ "$np" =~ ^[1-9][0-9]*$ ]] || { echo "bench_dist.sh: --np wants a positive integer, got '$np'" >&2; exit 2; }
[[ "$steps" =~ ^[1-9][0-9]*$ ]] || { echo "bench_dist.sh: --steps wants a positive integer, got '$steps'" >&2; exit 2; }
[[ "$accum" =~ ^[1-9][0-9]*$ ]] || { echo "bench_dist.sh: --accum wants a positive integer, got '$accum'" >&2; exit 2; }
[[ -f "$config" ]] || { echo "bench_dist.sh: --config: no file $config" >&2; exit 2; }
[[ $quick == 1 && $steps == 30 ]] && steps=8
if [[ -n "$only" && ! " ${sections[*]} " =~ " $only " ]]; then
  echo "bench_dist.sh: --only wants one of: ${sections[*]}; got '$only'" >&2
  exit 2
fi
if ! command -v mpirun > /dev/null; then
  echo "bench_dist.sh: mpirun not found: install Open MPI (scripts/install-deps.sh)" >&2
  exit 1
fi

# ---- build ----
build_dir="${BUILD_DIR:-build}"
[[ -x /usr/local/cuda/bin/nvcc ]] && export PATH="/usr/local/cuda/bin:$PATH"
cmake -S . -B "$build_dir" -DCMAKE_BUILD_TYPE=Release -DDARK_BUILD_BENCH=ON > /dev/null
if ! grep -q '^DARK_USE_MPI:BOOL=ON' "$build_dir/CMakeCache.txt"; then
  echo "bench_dist.sh: $build_dir is configured without MPI (DARK_USE_MPI=OFF): install Open MPI" \
    "(scripts/install-deps.sh) and reconfigure with -DDARK_USE_MPI=ON" >&2
  exit 1
fi
cmake --build "$build_dir" -j "${JOBS:-2}" --target "${targets[@]}" > /dev/null

out_dir="${out_dir:-cache/bench/dist-$(date +%Y%m%d-%H%M%S)}"
mkdir -p "$out_dir"
cpu="$(lscpu 2> /dev/null | sed -n 's/^Model name: *//p' | head -n 1)"
echo "CPU: ${cpu:-unknown}, $(nproc) cores; $np ranks; results in $out_dir"

# run_mpi ARGS...: mpirun with the settings every section shares (oversubscription allowed,
# no core binding, so a rank's communication thread and its caller share the machine).
run_mpi() {
  OMPI_MCA_rmaps_base_oversubscribe=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
    mpirun -np "$np" --oversubscribe --allow-run-as-root --bind-to none "$@"
}

section_allreduce() {
  local args=(--json "$out_dir/allreduce.json")
  [[ $quick == 1 ]] && args+=(--quick)
  [[ $strict == 1 ]] && args+=(--strict)
  run_mpi "$build_dir/bench/darkformer_bench_allreduce" "${args[@]}" | tee "$out_dir/allreduce.txt"
}

section_train() {
  local exe="$build_dir/darkformer" dir="$out_dir/train"
  mkdir -p "$dir"
  echo "$config: $steps steps; $np ranks x 1 thread, grad_accum $accum  vs  1 process x $np threads, grad_accum $((np * accum))"
  "$exe" prepare-data --config "$config" > "$dir/prepare.log" 2>&1 ||
    { echo "bench_dist.sh: prepare-data failed; see $dir/prepare.log" >&2; return 1; }
  local common=(--set "training.steps=$steps" --set training.eval_interval=1000000 --set training.checkpoint_interval=0
                --set training.generate_tokens=0 --set training.log_interval=1000000 --set training.eval_batches=1
                --set schedule.warmup_steps=0)
  rm -rf "$dir/one" "$dir/ranks"
  OMP_NUM_THREADS="$np" "$exe" train --config "$config" "${common[@]}" --set "training.grad_accum=$((np * accum))" \
    --set "output.dir=$dir/one" > "$dir/one.log" 2>&1 ||
    { echo "bench_dist.sh: the one-process run failed; see $dir/one.log" >&2; return 1; }
  OMP_NUM_THREADS=1 run_mpi -x OMP_NUM_THREADS "$exe" train --config "$config" "${common[@]}" \
    --set "training.grad_accum=$accum" --set "output.dir=$dir/ranks" > "$dir/ranks.log" 2>&1 ||
    { echo "bench_dist.sh: the $np-rank run failed; see $dir/ranks.log" >&2; return 1; }
  python3 - "$dir" "$np" "$strict" "${cpu:-unknown}" << 'PY' | tee "$out_dir/train.txt"
import json, statistics, sys
folder, np, strict, cpu = sys.argv[1], int(sys.argv[2]), sys.argv[3] == "1", sys.argv[4]
def read(run, world):
    rows = [json.loads(l) for l in open(f"{folder}/{run}/metrics.jsonl") if '"step_ms"' in l]
    timed = rows[3:] if len(rows) > 5 else rows  # the first steps warm caches
    med = lambda key: statistics.median(r[key] for r in timed) if key in timed[0] else None
    t = json.load(open(f"{folder}/{run}/config.json"))["training"]
    tokens = t["batch_size"] * t["grad_accum"] * world * json.load(open(f"{folder}/{run}/config.json"))["data"]["seq_len"]
    return {"step_ms": med("step_ms"), "tokens_per_s": tokens / (med("step_ms") / 1e3), "comm_wait_ms": med("comm_wait_ms"),
            "tokens_per_step": tokens}
one, ranks = read("one", 1), read("ranks", np)
exposed = 100 * ranks["comm_wait_ms"] / ranks["step_ms"]
print(f"CPU: {cpu}")
print(f"{'setup':<40} {'median step ms':>15} {'tokens/s':>10} {'comm wait ms':>13} {'exposed':>8}")
print(f"{f'1 process x {np} threads':<40} {one['step_ms']:>15.1f} {one['tokens_per_s']:>10.0f} {'-':>13} {'-':>8}")
print(f"{f'mpirun -np {np} x 1 thread (mpi)':<40} {ranks['step_ms']:>15.1f} {ranks['tokens_per_s']:>10.0f} "
      f"{ranks['comm_wait_ms']:>13.2f} {exposed:>7.2f}%")
ok = exposed <= 5.0
print(f"ranks / one process, tokens/s: {ranks['tokens_per_s'] / one['tokens_per_s']:.3f}x; exposed communication "
      f"{exposed:.2f}% of the step (target <= 5%): {'pass' if ok else 'FAIL'}")
json.dump({"cpu": cpu, "np": np, "one_process": one, "ranks": ranks, "exposed_percent": exposed},
          open(f"{folder}/../train.json", "w"), indent=1)
sys.exit(1 if strict and not ok else 0)
PY
}

failed=0
for section in "${sections[@]}"; do
  [[ -n "$only" && "$section" != "$only" ]] && continue
  echo
  echo "==== $section (load average before: $(cut -d' ' -f1-3 /proc/loadavg)) ===="
  if ! "section_$section"; then
    echo "bench_dist.sh: section $section failed" >&2
    failed=1
  fi
  echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
done
exit "$failed"
