#!/usr/bin/env bash
# Builds darkformer_bench (Release, reusing build/ when it exists) and runs it; every
# argument goes to the benchmark (scripts/bench.sh --help lists them).
# Env: BUILD_DIR (default build), JOBS (parallel build jobs, default 2).
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir="${BUILD_DIR:-build}"

cmake -S . -B "$build_dir" -DCMAKE_BUILD_TYPE=Release -DDARK_BUILD_BENCH=ON > /dev/null
cmake --build "$build_dir" -j "${JOBS:-2}" --target darkformer_bench

cpu="$(lscpu 2> /dev/null | sed -n 's/^Model name: *//p' | head -n 1)"
echo "OMP_NUM_THREADS=${OMP_NUM_THREADS:-unset (OpenMP default, $(nproc) cores)}"
echo "CPU: ${cpu:-unknown}"
exec "$build_dir/bench/darkformer_bench" "$@"
