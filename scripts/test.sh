#!/usr/bin/env bash
# Installs what the build needs, builds darkformer with its tests, runs every test with
# CTest, then a bounded fuzzing run (scripts/fuzz.sh: the libFuzzer targets of tests/fuzz/,
# 30 s each, two at a time; 4 to 5 minutes with its clang build on 2 cores).
# Usage: scripts/test.sh [--sanitize] [extra ctest arguments]
#   --sanitize   build in build-sanitize/ with AddressSanitizer + UndefinedBehaviorSanitizer
# The fuzzing run follows a full ctest run only (no --sanitize, no ctest arguments).
# Environment: DARK_USE_CUDA=ON|OFF (default: ON when nvcc is found), JOBS (default: nproc),
# DARK_FUZZ_SECONDS (per fuzz target, default 30; 0 skips fuzzing).
set -euo pipefail
cd "$(dirname "$0")/.."

build_dir=build
fuzz=1
[[ $# -gt 0 ]] && fuzz=0
cmake_args=(-DCMAKE_BUILD_TYPE=Release -DDARK_BUILD_TESTS=ON)
if [[ "${1:-}" == "--sanitize" ]]; then
  shift
  build_dir=build-sanitize
  # CUDA objects are not instrumented; the sanitizer build checks the host code only.
  cmake_args=(-DCMAKE_BUILD_TYPE=RelWithDebInfo -DDARK_BUILD_TESTS=ON -DDARK_SANITIZE=ON -DDARK_USE_CUDA=OFF -DDARK_BUILD_BENCH=OFF)
  # Processes under mpirun skip the leak check (Open MPI's plug-ins; train/dist/leak_check_under_mpirun.h).
  export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1
  export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
fi
if [[ -n "${DARK_USE_CUDA:-}" ]]; then cmake_args+=(-DDARK_USE_CUDA="$DARK_USE_CUDA"); fi
[[ -x /usr/local/cuda/bin/nvcc ]] && export PATH="/usr/local/cuda/bin:$PATH"

scripts/install-deps.sh
scripts/fetch-models.sh all  # the pretrained models the GGUF tests read (SmolLM2, Gemma 3 270M)
cmake -S . -B "$build_dir" "${cmake_args[@]}"
cmake --build "$build_dir" -j "${JOBS:-$(nproc)}"
ctest --test-dir "$build_dir" --output-on-failure -j "${JOBS:-$(nproc)}" "$@"
# After ctest, not as a ctest entry: its clang build and its two-at-a-time runs would
# compete with the tests that ctest -j runs in parallel, and its table is read on its own.
if [[ $fuzz -eq 1 && "${DARK_FUZZ_SECONDS:-30}" != 0 ]]; then
  scripts/fuzz.sh --seconds "${DARK_FUZZ_SECONDS:-30}" --jobs 2
fi
