#!/usr/bin/env bash
# Builds the libFuzzer targets of tests/fuzz/ (clang, AddressSanitizer + UndefinedBehavior-
# Sanitizer) in build-fuzz/ and runs each for a fixed time, J at a time, then prints a table:
# executions, coverage (cov: edges, ft: features, from libFuzzer's last status line), inputs
# added and the result. Fails when any target crashes, leaks, times out, runs out of memory
# or trips a sanitizer; the input that did it is kept in build-fuzz/artifacts/<target>/ and
# the end of the target's log (build-fuzz/logs/<target>.log) is printed.
# Inputs each run finds are kept in cache/fuzz/<target>/ (ignored by git) and read again by
# the next run, next to the committed seeds in tests/fuzz/corpus/<target>/.
# Usage: scripts/fuzz.sh [--seconds N] [--jobs J] [--make-seeds] [TARGET...]
#   --seconds N    per target (default 30, as in CI; e.g. 600 for a long run)
#   --jobs J       targets run at the same time (default 2)
#   --make-seeds   rewrite the generated seeds of tests/fuzz/corpus (fuzz_make_seeds), run nothing
#   TARGET         e.g. fuzz_gguf (default: every fuzz_*.cpp of tests/fuzz/)
set -euo pipefail
cd "$(dirname "$0")/.."

seconds=30
jobs=2
make_seeds=0
targets=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --seconds) seconds="$2"; shift 2 ;;
    --jobs) jobs="$2"; shift 2 ;;
    --make-seeds) make_seeds=1; shift ;;
    -h|--help) sed -n '2,14p' "$0"; exit 0 ;;
    -*) echo "fuzz.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
    *) targets+=("$1"); shift ;;
  esac
done
[[ "$seconds" =~ ^[0-9]+$ && "$seconds" -gt 0 ]] || { echo "fuzz.sh: --seconds needs a positive integer" >&2; exit 2; }
[[ "$jobs" =~ ^[0-9]+$ && "$jobs" -gt 0 ]] || { echo "fuzz.sh: --jobs needs a positive integer" >&2; exit 2; }
command -v clang++ >/dev/null || { echo "fuzz.sh: clang++ not found (scripts/install-deps.sh installs it)" >&2; exit 1; }

build=build-fuzz
start=$SECONDS
launcher=()
command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
mkdir -p "$build"
cmake -S . -B "$build" -DDARK_BUILD_FUZZERS=ON -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
  "${launcher[@]}" >"$build/configure.log" 2>&1 || { cat "$build/configure.log"; exit 1; }
cmake --build "$build" -j "${JOBS:-$(nproc)}" >"$build/build.log" 2>&1 || { tail -50 "$build/build.log"; exit 1; }
echo "fuzz.sh: built the fuzz targets in $((SECONDS - start)) s"
bin="$build/tests/fuzz"

if [[ $make_seeds -eq 1 ]]; then
  # Rewrites the generated seeds; the regression-* inputs (found crashes) stay.
  "$bin/fuzz_make_seeds" tests/fuzz/corpus
  exit 0
fi
if [[ ${#targets[@]} -eq 0 ]]; then
  IFS=';' read -r -a targets < "$build/fuzz_targets.txt"
fi
for t in "${targets[@]}"; do
  [[ -x "$bin/$t" && "$t" == fuzz_* && "$t" != fuzz_make_seeds ]] ||
    { echo "fuzz.sh: no fuzz target $t (have: $(tr ';' ' ' < "$build/fuzz_targets.txt"))" >&2; exit 2; }
done

# One thread per target (the GGUF kernels use OpenMP); sanitizer reports end the run.
export OMP_NUM_THREADS=1
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:allocator_may_return_null=1
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
rm -rf "$build/logs"
mkdir -p "$build/logs"
run_one() {
  local t="$1"
  mkdir -p "cache/fuzz/$t" "$build/artifacts/$t"
  # -timeout: one input taking over 10 s is a hang; -rss_limit_mb: 2 GiB is an out-of-memory.
  local rc=0
  "$bin/$t" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
    -artifact_prefix="$build/artifacts/$t/" "cache/fuzz/$t" "tests/fuzz/corpus/$t" >"$build/logs/$t.log" 2>&1 || rc=$?
  echo "$rc" >"$build/logs/$t.rc"
}
running=0
for t in "${targets[@]}"; do
  if [[ $running -ge $jobs ]]; then
    wait -n || true
    running=$((running - 1))
  fi
  run_one "$t" &
  running=$((running + 1))
done
wait || true

failed=0
printf '%-26s %8s %12s %7s %7s %6s\n' target result executions cov ft new
for t in "${targets[@]}"; do
  log="$build/logs/$t.log"
  rc=$(cat "$build/logs/$t.rc" 2>/dev/null || echo 1)
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  added=$(sed -n 's/^stat::new_units_added: *//p' "$log" | tail -1)
  status=$(grep -E '^#[0-9]+.*cov: [0-9]+' "$log" | tail -1 || true)
  cov=$(sed -n 's/.* cov: \([0-9]*\).*/\1/p' <<<"$status")
  ft=$(sed -n 's/.* ft: \([0-9]*\).*/\1/p' <<<"$status")
  result=ok
  if [[ "$rc" != 0 ]] || grep -qE 'ERROR: (AddressSanitizer|LeakSanitizer|libFuzzer)|runtime error:|fuzz invariant violated' "$log"; then
    result="FAIL($rc)"
    failed=1
  fi
  printf '%-26s %8s %12s %7s %7s %6s\n' "$t" "$result" "${execs:--}" "${cov:--}" "${ft:--}" "${added:--}"
done
for t in "${targets[@]}"; do
  rc=$(cat "$build/logs/$t.rc" 2>/dev/null || echo 1)
  if [[ "$rc" != 0 ]]; then
    echo "---- $t (exit $rc): end of $build/logs/$t.log; inputs in $build/artifacts/$t/"
    tail -40 "$build/logs/$t.log"
  fi
done
echo "fuzz.sh: ${#targets[@]} targets, ${seconds} s each, $jobs at a time: $((SECONDS - start)) s in all"
exit $failed
