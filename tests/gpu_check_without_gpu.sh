#!/usr/bin/env bash
# The device check on a machine without a GPU (CI has none), in both of its modes:
#   1. scripts/gpu-check.sh (build mode) says "no GPU", writes its summary and exits 0;
#   2. scripts/gpu-bundle.sh packs this build (--no-build: the programs ctest already built),
#      and scripts/gpu-check.sh --bundle --cpu-stages runs from the archive: every library
#      resolves inside the bundle or to what a bare GPU machine provides (DARK_BUNDLE_STRICT),
#      it says "no GPU", and the bundle's own Open MPI runs the 2-rank stage (collectives, and
#      2 ranks equal to 1 process bit for bit). Where this machine lets us (unshare -m as
#      root), the check runs with this machine's Open MPI, PMIx, oneDNN, ICU, SentencePiece,
#      spdlog, fmt, the build folder and every other library the bundle brings hidden, as on
#      the GPU machine that has none of them.
# Where nvidia-smi finds a GPU the full check would run for minutes: the scripts are then only
# parsed (bash -n).
# Usage: gpu_check_without_gpu.sh REPO_ROOT [BUILD_DIR]  (no BUILD_DIR: a build without CUDA
# or benchmarks, which has nothing to bundle; part 2 is then left out and says so)
set -euo pipefail
repo="$1"
build="${2:-}"
if command -v nvidia-smi > /dev/null 2>&1 && nvidia-smi -L 2> /dev/null | grep -q "^GPU"; then
  bash -n "$repo/scripts/gpu-check.sh" && bash -n "$repo/scripts/gpu-bundle.sh" && echo "a GPU is present: syntax checked only"
  exit 0
fi
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

# ---- 1. build mode ----
OUT="$work/build-mode" bash "$repo/scripts/gpu-check.sh" > "$work/build-mode.log" 2>&1 ||
  { cat "$work/build-mode.log"; fail "gpu-check.sh exited non-zero without a GPU"; }
grep -q "no GPU" "$work/build-mode.log" || { cat "$work/build-mode.log"; fail "gpu-check.sh did not say no GPU"; }
grep -q '"gpu": false' "$work/build-mode/summary.json" || fail "summary.json lacks gpu: false"
echo "build mode: no GPU, exit 0"

# ---- 2. bundle mode ----
if [[ -z "$build" ]]; then
  echo "bundle mode not tested: this build has no CUDA backend or no benchmarks to bundle"
  exit 0
fi
bash "$repo/scripts/gpu-bundle.sh" --build-dir "$build" --no-build --no-data --fast --out "$work/bundle.tar.xz" \
  > "$work/bundle.log" 2>&1 || { cat "$work/bundle.log"; fail "gpu-bundle.sh failed"; }
tail -n 1 "$work/bundle.log"
check=(env DARK_BUNDLE_STRICT=1 OUT="$work/bundle-mode" bash "$repo/scripts/gpu-check.sh" --bundle "$work/bundle.tar.xz"
       --cpu-stages)
if [[ $(id -u) == 0 ]] && unshare -m true 2> /dev/null; then
  # Hide what the bundle brings (the real files behind this machine's copies of its libraries),
  # Open MPI's and PMIx's folders and programs, and the build folder.
  hide=("$build" /usr/lib/x86_64-linux-gnu/openmpi /usr/lib/x86_64-linux-gnu/pmix2 /usr/share/openmpi /etc/openmpi)
  mkdir -p "$work/libs" && tar -C "$work/libs" -xJf "$work/bundle.tar.xz" darkformer-bundle/lib
  for lib in "$work"/libs/darkformer-bundle/lib/*; do
    for dir in /lib/x86_64-linux-gnu /usr/lib/x86_64-linux-gnu /usr/lib64 /lib64; do
      [[ -e "$dir/$(basename "$lib")" ]] && hide+=("$(readlink -f "$dir/$(basename "$lib")")")
    done
  done
  for p in orterun orted mpirun mpiexec; do command -v "$p" > /dev/null && hide+=("$(readlink -f "$(command -v "$p")")"); done
  printf '%s\n' "${hide[@]}" | sort -u > "$work/hidden.txt"
  echo "hiding $(wc -l < "$work/hidden.txt") paths (this machine's copies of what the bundle brings)"
  unshare -m bash -c 'while read -r p; do
                        if [[ -d "$p" ]]; then mount -t tmpfs none "$p"; elif [[ -e "$p" ]]; then mount --bind /dev/null "$p"; fi
                      done < "$1"; shift; exec "$@"' hide "$work/hidden.txt" "${check[@]}" > "$work/bundle-mode.log" 2>&1 &&
    rc=0 || rc=$?
else
  echo "unshare -m is not available: the bundle runs beside this machine's libraries (strict resolution still applies)"
  "${check[@]}" > "$work/bundle-mode.log" 2>&1 && rc=0 || rc=$?
fi
cat "$work/bundle-mode/summary.txt" 2> /dev/null || true
[[ $rc == 0 ]] || { cat "$work/bundle-mode.log"; fail "gpu-check.sh --bundle exited $rc"; }
grep -q "no GPU" "$work/bundle-mode.log" || fail "gpu-check.sh --bundle did not say no GPU"
python3 - "$work/bundle-mode" << 'EOF' || fail "the bundle-mode summary is not what it should be"
import json, sys
out = sys.argv[1]
s = json.load(open(f"{out}/summary.json"))
stages = {st["stage"]: st["status"] for st in s["stages"]}
want = {"setup": "passed", "gpu": "skipped", "mpi:collectives": "passed", "mpi:two-ranks": "passed"}
bad = {k: stages.get(k) for k, v in want.items() if stages.get(k) != v}
assert not bad, f"stages {bad}, want {want}"
assert s["gpu"] == {"gpu": False}, s["gpu"]
assert s["manifest"]["commit"], "no commit in the manifest"
assert s["cpu"]["cores"] >= 1 and "avx512_bf16" in s["cpu"]["flags"], s["cpu"]
text = open(f"{out}/summary.txt").read()
assert len(text) <= 6000, f"summary is {len(text)} characters"
assert "same bits over 12 steps" in text, text
print("bundle mode: libraries resolve, no GPU, 2 ranks = 1 process bit for bit, summary", len(text), "characters")
EOF
