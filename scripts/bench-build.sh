# Sourced by the CPU benchmark scripts: bench_binary SCRIPT TARGET builds the Release target
# TARGET in $BUILD_DIR (default build) with $JOBS jobs (default 2), or with SKIP_BUILD=1 uses
# the binary already there, and sets $bench to its path.
bench_binary() {
  local script="$1" target="$2"
  build_dir="${BUILD_DIR:-build}"
  bench="$build_dir/bench/$target"
  if [[ "${SKIP_BUILD:-0}" == 1 ]]; then
    [[ -x "$bench" ]] || { echo "$script: SKIP_BUILD=1 but $bench does not exist" >&2; exit 1; }
    echo "SKIP_BUILD=1: using the existing $bench ($(date -r "$bench" '+%Y-%m-%d %H:%M'))"
  else
    cmake -S . -B "$build_dir" -DCMAKE_BUILD_TYPE=Release -DDARK_BUILD_BENCH=ON > /dev/null
    cmake --build "$build_dir" -j "${JOBS:-2}" --target "$target" > /dev/null
  fi
}
