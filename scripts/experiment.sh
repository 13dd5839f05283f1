#!/usr/bin/env bash
# Runs one of the experiments in configs/experiments/ end to end: builds darkformer, fetches
# what the experiment needs (the SmolLM2 model, the pretrained small softmax model), runs the
# sweep (resuming an interrupted one) and writes its report.
# Usage: scripts/experiment.sh NAME [extra sweep flags]   e.g. scripts/experiment.sh lr_sweep_spikes
#   NAME: a file of configs/experiments/ without .json (results: docs/results.md)
# Environment: JOBS (points trained at once; default 2 for the small models, 1 for SmolLM2),
#   BUILD_DIR (default build; a separate one keeps long experiments off a tree being rebuilt),
#   SKIP_BUILD=1 (use BUILD_DIR's darkformer as it is: a queue of experiments keeps one binary).
set -euo pipefail
cd "$(dirname "$0")/.."

name=${1:?usage: scripts/experiment.sh NAME [sweep flags]; see configs/experiments/}
shift
sweep=configs/experiments/$name.json
[[ -f "$sweep" ]] || { echo "experiment: no $sweep; choose one of: $(ls configs/experiments | sed 's/\.json$//' | tr '\n' ' ')" >&2; exit 2; }

build=${BUILD_DIR:-build}
scripts/install-deps.sh
if [[ "${SKIP_BUILD:-0}" != 1 ]]; then
  cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release > /dev/null
  cmake --build "$build" -j "$(nproc)" --target darkformer
fi
[[ -x "$build/darkformer" ]] || { echo "experiment: no $build/darkformer (build it, or unset SKIP_BUILD)" >&2; exit 2; }

jobs=${JOBS:-2}
case "$name" in
  smollm2_*)
    scripts/fetch-models.sh
    jobs=${JOBS:-1}  # one 135M-parameter model already uses every core
    ;;
  finetune_compare)
    # The base: configs/small.json trained with softmax for 1500 of its 5000 steps (~45 min on 2 cores).
    if [[ ! -d runs/small-softmax-1500/checkpoints ]]; then
      echo "experiment: pretraining the softmax base model (runs/small-softmax-1500)"
      "$build"/darkformer train --config configs/small.json --set training.steps=1500 \
        --set schedule.warmup_steps=100 --set output.dir=runs/small-softmax-1500
    fi
    ;;
  finetune_lr_stress*)
    # The base: configs/small.json trained with softmax for 600 steps (~15 min on 2 cores).
    if [[ ! -d runs/small-softmax-600/checkpoints ]]; then
      echo "experiment: pretraining the softmax base model (runs/small-softmax-600)"
      "$build"/darkformer train --config configs/small.json --set training.steps=600 \
        --set schedule.warmup_steps=100 --set training.eval_interval=200 --set output.dir=runs/small-softmax-600
    fi
    ;;
  finetune_swap_seeds)
    # The base: configs/quickstart.json trained with softmax for 600 of its 1000 steps (~6 min on 2 cores).
    if [[ ! -d runs/quickstart-softmax-600/checkpoints ]]; then
      echo "experiment: pretraining the softmax base model (runs/quickstart-softmax-600)"
      "$build"/darkformer train --config configs/quickstart.json --set training.steps=600 \
        --set training.eval_interval=200 --set training.generate_tokens=0 --set output.dir=runs/quickstart-softmax-600
    fi
    ;;
esac

start=$(date +%s)
"$build"/darkformer sweep --config "$sweep" --jobs "$jobs" "$@"
out=$(python3 -c 'import json,sys,re; t=open(sys.argv[1]).read(); t=re.sub(r"^\s*//.*$","",t,flags=re.M); print(json.loads(t).get("output",""))' "$sweep")
"$build"/darkformer report "${out:-runs/sweeps/$name}"
echo "experiment $name: $(( ($(date +%s) - start) / 60 )) min; report in ${out:-runs/sweeps/$name}/report.md"
