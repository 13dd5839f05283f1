#!/usr/bin/env bash
# Builds the CUDA targets here and packs everything a GPU machine needs to run the device
# check with nothing built there (scripts/gpu-check.sh --bundle ARCHIVE): the GPU machine we
# are lent has the NVIDIA driver, the CUDA toolkit and PyTorch, but none of our Debian
# dependencies and no package registry (docs/gpus.md, "The device check").
#
# The archive (tar + xz, at most --max-mb, default 40 MB) holds, under darkformer-bundle/:
#   bin/       darkformer, the GPU test programs, dist_collectives and the GPU benchmarks
#              (stripped, RUNPATH $ORIGIN/../lib)
#   lib/       libdarkformer_*.so and every shared library they load that a bare machine may
#              lack: all but glibc's, libstdc++, libgcc_s, libz and CUDA's own (cudart,
#              cuBLAS, NCCL, the driver), which the GPU machine provides
#   mpi/       a relocatable Open MPI (mpirun, its components and help files, PMIx's), so
#              `mpirun -np 2` runs there (OPAL_PREFIX; see gpu-check.sh)
#   src/       the repository's tracked files as they are in this working tree (scripts,
#              configs, bench/*.py), with the quickstart's prepared data in src/cache/data/
#   corpus/    the debdocs-python corpus (the prepared data's inputs are checked against it),
#              unpacked there to /usr/share/doc/python3.11/html/_sources when that is missing
#   MANIFEST.json  commit, whether the tree was dirty, build settings, this machine's CPU,
#              the libraries left to the GPU machine (a regex gpu-check.sh checks against),
#              every file with its size
#
# Usage: scripts/gpu-bundle.sh [--build-dir DIR] [--no-build] [--arch A] [--out FILE]
#                              [--max-mb N] [--no-data] [--fast]
#   --build-dir DIR  the CMake build to use (default build-gpu: configured here as Release,
#                    sm_<arch>, CUDA emulator off, tests and benchmarks on)
#   --no-build       pack what DIR already holds (it must be a CUDA build; CI packs build/)
#   --arch A         CUDA architecture when configuring (default 90a: H100 / H200 with the wgmma kernels)
#   --out FILE       the archive (default cache/gpu-bundle/darkformer-gpu-bundle.tar.xz)
#   --max-mb N       fail when the archive is larger (default 40)
#   --no-data        leave out the prepared data and the corpus (the check then trains on
#                    the repository's own text)
#   --fast           xz -1 instead of xz -9 (for tests; the size check still applies)
# Exit 0 with the archive written, 1 when something is missing or the archive is too large,
# 2 on a bad command line.
set -euo pipefail
cd "$(dirname "$0")/.."
root="$(pwd)"

build="build-gpu"
configure=1
arch=90a
out="cache/gpu-bundle/darkformer-gpu-bundle.tar.xz"
max_mb=40
with_data=1
xz_level=-9
usage() { sed -n '/^# Usage:/,/^# Exit 0/p' "$0" | sed 's/^# \{0,1\}//'; }
while [[ $# -gt 0 ]]; do
  case "$1" in
    --build-dir) build="${2:?--build-dir needs a value}"; shift 2 ;;
    --no-build) configure=0; shift ;;
    --arch) arch="${2:?--arch needs a value}"; shift 2 ;;
    --out) out="${2:?--out needs a value}"; shift 2 ;;
    --max-mb) max_mb="${2:?--max-mb needs a value}"; shift 2 ;;
    --no-data) with_data=0; shift ;;
    --fast) xz_level=-1; shift ;;
    -h | --help) usage; exit 0 ;;
    *) echo "gpu-bundle.sh: unknown flag '$1'" >&2; usage >&2; exit 2 ;;
  esac
done
say() { echo "[gpu-bundle $(date +%H:%M:%S)] $*" >&2; }
die() { echo "gpu-bundle.sh: $*" >&2; exit 1; }

# What runs on the GPU machine (scripts/gpu-check.sh names the same programs).
programs=(darkformer tests/test_gpu_ops tests/test_gpu_kernels tests/test_gpu_training tests/test_device_placement
          tests/test_dist_nccl tests/test_data_parallel_gpu tests/mpi/dist_collectives
          bench/darkformer_bench_train bench/darkformer_bench_gpu_attention)
targets=()
for p in "${programs[@]}"; do targets+=("$(basename "$p")"); done

# ---- build ----
[[ -x /usr/local/cuda/bin/nvcc ]] && export PATH="/usr/local/cuda/bin:$PATH"
if [[ $configure == 1 ]]; then
  say "configuring and building $build (Release, sm_$arch, emulator off)"
  mkdir -p "$build"
  cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DDARK_CUDA_ARCHITECTURES="$arch" -DDARK_BUILD_CUDA_EMULATOR=OFF \
    -DDARK_BUILD_TESTS=ON -DDARK_BUILD_BENCH=ON -DDARK_USE_CUDA=ON > "$build/gpu-bundle-configure.log" 2>&1 ||
    { tail -n 20 "$build/gpu-bundle-configure.log" >&2; die "configure failed (log: $build/gpu-bundle-configure.log)"; }
  cmake --build "$build" -j "${JOBS:-$(nproc)}" --target "${targets[@]}" >&2
fi
[[ -f "$build/CMakeCache.txt" ]] || die "$build is not a CMake build folder"
grep -Eq "^DARK_USE_CUDA:[A-Z]+=ON" "$build/CMakeCache.txt" || die "$build is not a CUDA build (DARK_USE_CUDA is off)"
build_type="$(sed -n 's/^CMAKE_BUILD_TYPE:STRING=//p' "$build/CMakeCache.txt")"
build_arch="$(sed -n 's/^DARK_CUDA_ARCHITECTURES:STRING=//p' "$build/CMakeCache.txt")"
for p in "${programs[@]}"; do [[ -x "$build/$p" ]] || die "$build/$p is missing (build it, or drop --no-build)"; done

# ---- stage ----
stage="$(mktemp -d)"
trap 'rm -rf "$stage"' EXIT
b="$stage/darkformer-bundle"
mkdir -p "$b/bin" "$b/lib" "$b/mpi" "$b/src"

# Libraries the GPU machine provides itself: glibc's, the compiler runtime, zlib, CUDA's.
provided='^(ld-linux[-a-z0-9_]*|libc|libm|libdl|libpthread|librt|libresolv|libutil|libstdc\+\+|libgcc_s|libz|libcuda|libcudart|libcublas|libcublasLt|libnccl|linux-vdso)\.so'
# Copies the libraries that ELF file $1 loads (ldd's resolution here) into lib/, once each.
copy_dependencies() {
  local name path
  while read -r name path; do
    [[ "$name" =~ $provided ]] && continue
    [[ -e "$b/lib/$name" ]] && continue
    [[ "$path" == "not" || -z "$path" ]] && die "$1 needs $name, which does not resolve on this machine either"
    cp -L "$path" "$b/lib/$name"
  done < <(ldd "$1" | awk '/=>/ {print $1, $3}')
}

say "programs and libraries"
for p in "${programs[@]}"; do cp "$build/$p" "$b/bin/"; done
cp "$build"/libdarkformer_*.so "$b/lib/"
for f in "$b"/bin/* "$b"/lib/libdarkformer_*.so; do copy_dependencies "$f"; done

# ---- Open MPI, relocatable ----
# Debian's layout under the prefix /usr is kept under mpi/, so OPAL_PREFIX=mpi finds its
# components and help files; PMIx's (an external library here) go under mpi/pmix. Components
# for networks a single machine does not use (InfiniBand, OFI, UCX, PSM) and for OpenSHMEM
# are left out with their heavy libraries.
say "Open MPI"
mpirun_path="$(readlink -f "$(command -v mpirun)")" || die "mpirun not found (scripts/install-deps.sh installs Open MPI)"
ompi_pkglibdir="$(ompi_info --path pkglibdir --parsable | sed -n 's/^path:pkglibdir://p')"
ompi_pkgdatadir="$(ompi_info --path pkgdatadir --parsable | sed -n 's/^path:pkgdatadir://p')"
ompi_prefix="$(ompi_info --path prefix --parsable | sed -n 's/^path:prefix://p')"
[[ -d "$ompi_pkglibdir" ]] || die "cannot find Open MPI's components ($ompi_pkglibdir)"
mkdir -p "$b/mpi/bin" "$b/mpi/${ompi_pkglibdir#"$ompi_prefix"/}" "$b/mpi/${ompi_pkgdatadir#"$ompi_prefix"/}" "$b/mpi/etc"
cp "$mpirun_path" "$b/mpi/bin/mpirun"
cp "$(dirname "$mpirun_path")/orted" "$b/mpi/bin/" 2>/dev/null || true
copy_dependencies "$b/mpi/bin/mpirun"
for c in "$ompi_pkglibdir"/mca_*.so; do
  [[ "$(basename "$c")" =~ ^mca_(atomic|memheap|scoll|spml|sshmem)_|_(ofi|openib|ucx|psm|psm2|usnic|verbs)\.so$ ]] && continue
  cp "$c" "$b/mpi/${ompi_pkglibdir#"$ompi_prefix"/}/"
  copy_dependencies "$c"
done
cp -r "$ompi_pkgdatadir"/. "$b/mpi/${ompi_pkgdatadir#"$ompi_prefix"/}/"
: > "$b/mpi/etc/openmpi-mca-params.conf"
pmix_root="$(ldd "$b/mpi/${ompi_pkglibdir#"$ompi_prefix"/}/mca_pmix_ext3x.so" 2>/dev/null | awk '/libpmix/ {print $3}')"
if [[ -n "$pmix_root" ]]; then
  pmix_root="$(dirname "$(dirname "$(readlink -f "$pmix_root")")")"  # .../pmix2 (lib/, share/)
  mkdir -p "$b/mpi/pmix/lib"
  [[ -d "$pmix_root/lib/pmix" ]] && cp -r "$pmix_root/lib/pmix" "$b/mpi/pmix/lib/"
  [[ -d "$pmix_root/share" ]] && cp -r "$pmix_root/share" "$b/mpi/pmix/"
  for c in "$b"/mpi/pmix/lib/pmix/*.so; do [[ -e "$c" ]] && copy_dependencies "$c"; done
fi

# Stripped, and finding their libraries beside them wherever the bundle is unpacked.
strip --strip-unneeded "$b"/bin/* "$b"/lib/*.so* 2> /dev/null || true
if command -v patchelf > /dev/null; then
  for f in "$b"/bin/*; do patchelf --set-rpath '$ORIGIN/../lib' "$f"; done
  for f in "$b"/lib/libdarkformer_*.so; do patchelf --set-rpath '$ORIGIN' "$f"; done
fi

# ---- sources, data, corpus ----
say "sources"
git ls-files -z --cached | while IFS= read -r -d '' f; do
  [[ -f "$f" ]] || continue  # deleted in the working tree
  mkdir -p "$b/src/$(dirname "$f")"
  cp -p "$f" "$b/src/$f"
done
git ls-files -z --others --exclude-standard | while IFS= read -r -d '' f; do  # new files not yet committed
  mkdir -p "$b/src/$(dirname "$f")"
  cp -p "$f" "$b/src/$f"
done
corpus_dir=/usr/share/doc/python3.11/html/_sources
data_dir=cache/data/debdocs-python-sentencepiece-8192
if [[ $with_data == 1 ]]; then
  [[ -d "$corpus_dir" ]] || die "the debdocs-python corpus ($corpus_dir) is missing: scripts/install-deps.sh installs it, or pass --no-data"
  if [[ ! -f "$data_dir/meta.json" ]]; then
    say "preparing the quickstart's data ($data_dir)"
    "$build/darkformer" prepare-data --config configs/quickstart.json >&2
  fi
  mkdir -p "$b/src/$data_dir" "$b/corpus"
  cp -p "$data_dir"/* "$b/src/$data_dir/"
  tar -C "$(dirname "$corpus_dir")" -cf "$b/corpus/python3.11-doc-sources.tar" "$(basename "$corpus_dir")"
fi

# ---- manifest and archive ----
python3 - "$b" "$root" "$build_type" "$build_arch" "$with_data" "$provided" << 'EOF' > "$b/MANIFEST.json"
import json, os, platform, subprocess, sys
b, root, build_type, arch, with_data, provided = sys.argv[1:]
def git(*a):
    return subprocess.run(["git", "-C", root, *a], capture_output=True, text=True).stdout.strip()
cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), platform.machine())
files = {}
for d, _, names in os.walk(b):
    for n in names:
        p = os.path.join(d, n)
        files[os.path.relpath(p, b)] = os.path.getsize(p)
print(json.dumps({"commit": git("rev-parse", "HEAD"), "dirty": bool(git("status", "--porcelain")),
                  "subject": git("log", "-1", "--format=%s"), "build_type": build_type, "cuda_architectures": arch,
                  "built_on": {"cpu": cpu, "host": platform.node()}, "data": with_data == "1",
                  "machine_provides": provided,
                  "files": dict(sorted(files.items()))}, indent=1))
EOF
mkdir -p "$(dirname "$out")"
say "packing $(du -sh "$b" | cut -f1) with xz $xz_level"
tar -C "$stage" -cf - darkformer-bundle | xz $xz_level -T0 > "$out.tmp"
mv "$out.tmp" "$out"
size=$(stat -c %s "$out")
say "wrote $out: $((size / 1024 / 1024)) MiB ($(python3 -c "print(len(__import__('json').load(open('$b/MANIFEST.json'))['files']))") files)"
if (( size > max_mb * 1024 * 1024 )); then
  die "$out is $((size / 1024 / 1024)) MiB, over the limit of $max_mb MiB"
fi
echo "$out"
