#!/usr/bin/env bash
# Installs what the build needs, builds darkformer and runs the main job. Until the
# pretraining issue lands, the main job is the autograd demo: a small MLP trained with
# SGD on a synthetic regression task, printing its loss as it falls.
set -euo pipefail
cd "$(dirname "$0")/.."
[[ -x /usr/local/cuda/bin/nvcc ]] && export PATH="/usr/local/cuda/bin:$PATH"

scripts/install-deps.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release
cmake --build build -j "${JOBS:-$(nproc)}" --target darkformer
build/darkformer --version
build/darkformer demo-mlp "$@"
