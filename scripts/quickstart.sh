#!/usr/bin/env bash
# Installs what the build needs, builds darkformer and runs the main job: prepares the
# debdocs-python corpus (tokenizer + token shards, once), pretrains configs/quickstart.json
# (about 3 minutes on 2 cores), evaluates the final checkpoint and samples from it.
# Each run gets a new folder runs/quickstart-<time>, so nothing earlier is overwritten.
# Extra arguments go to `darkformer train` (e.g. --set training.steps=200).
set -euo pipefail
cd "$(dirname "$0")/.."
[[ -x /usr/local/cuda/bin/nvcc ]] && export PATH="/usr/local/cuda/bin:$PATH"

scripts/install-deps.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release
cmake --build build -j "${JOBS:-$(nproc)}" --target darkformer
build/darkformer --version

run="runs/quickstart-$(date +%Y%m%d-%H%M%S)"
build/darkformer prepare-data --config configs/quickstart.json
build/darkformer train --config configs/quickstart.json --set output.dir="$run" "$@"
build/darkformer eval --checkpoint "$run"
build/darkformer generate --checkpoint "$run" --prompt "To create a list" --max-tokens 60 --seed 1
echo "run folder: $run (config.json, metrics.jsonl, checkpoints/, sample.txt)"
