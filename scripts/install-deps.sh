#!/usr/bin/env bash
# Installs the Debian packages darkformer needs to build, test and benchmark.
# Idempotent: when every package is already present it only checks and returns.
set -euo pipefail

packages=(
  build-essential cmake pkg-config
  libdnnl-dev            # oneDNN: CPU matmul
  ocl-icd-opencl-dev opencl-c-headers  # required by Debian's oneDNN CMake config
  nlohmann-json3-dev     # JSON configs
  libboost-dev           # Boost.CRC: the CRC-32C of TensorBoard event files (header-only)
  libspdlog-dev          # console logging
  libsentencepiece-dev   # tokenizer (data/)
  libicu-dev             # Unicode categories for the byte-level BPE pre-tokenizer (data/)
  libopenmpi-dev openmpi-bin  # multi-process launcher and CPU all-reduce
  slurm-wlm munge        # scripts/slurm-check.sh: a one-node Slurm for the documented sbatch script (~10 s)
  libgtest-dev libgmock-dev   # unit tests
  clang libclang-rt-dev libomp-dev  # libFuzzer targets (tests/fuzz/, scripts/fuzz.sh)
  libbenchmark-dev       # bench/
  python3-numpy          # reference-value scripts
  python3-venv           # the venvs of tests/tensorboard_check.sh and scripts/torch-venv.sh
  gnuplot-nox            # PNG plots of `darkformer report` (pngcairo terminal)
  patchelf               # scripts/gpu-bundle.sh: bundled programs find their libraries beside them
  python3.11-doc linux-doc-6.1  # the "debdocs" pretraining corpus (reStructuredText sources)
  libpython3.11-stdlib   # with the two above, the "longdocs" corpus: the standard library's .py sources
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#packages[@]} packages present"
  exit 0
fi

echo "install-deps: installing ${missing[*]}"
SUDO=""
[ "$(id -u)" -ne 0 ] && SUDO="sudo"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
