#!/usr/bin/env bash
# Distributed benchmarks, one section after another, each under `mpirun -np N`:
#   allreduce  all-reduce bandwidth of darkformer's mpi communicator against raw
#              MPI_Allreduce on the same buffers (bench/bench_allreduce.cpp), 1 KiB .. 256 MiB,
#              target ours / MPI >= 0.9 from 1 MiB.
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

sections=(allreduce)
targets=(darkformer_bench_allreduce)
np=2
only=""
quick=0
strict=0
out_dir=""
usage() {
  cat << 'EOF'
usage: scripts/bench_dist.sh [flags]
Distributed benchmarks under mpirun; sections: allreduce.

  --np N         ranks (default 2; oversubscribed when above the core count)
  --only NAME    run one section only
  --quick        short runs, for a smoke test
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
    --strict) strict=1; shift ;;
    -h | --help) usage; exit 0 ;;
    *) echo "bench_dist.sh: unknown flag '$1'" >&2; usage >&2; exit 2 ;;
  esac
done
[[ "$np" =~ ^[1-9][0-9]*$ ]] || { echo "bench_dist.sh: --np wants a positive integer, got '$np'" >&2; exit 2; }
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
