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
[[ -f "$sweep" || "$name" == *_probe || "$name" == *_probe_window ]] ||
  { echo "experiment: no $sweep; choose one of: gemma3_probe smollm2_probe gemma3_probe_window smollm2_probe_window $(ls configs/experiments | sed 's/\.json$//' | tr '\n' ' ')" >&2; exit 2; }

build=${BUILD_DIR:-build}
scripts/install-deps.sh
if [[ "${SKIP_BUILD:-0}" != 1 ]]; then
  cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release > /dev/null
  cmake --build "$build" -j "$(nproc)" --target darkformer
fi
[[ -x "$build/darkformer" ]] || { echo "experiment: no $build/darkformer (build it, or unset SKIP_BUILD)" >&2; exit 2; }

# A pretrained model as released, as a checkpoint the probe reads: one optimizer step at lr
# 1e-12 (limited_attention) on 4 x 512-token windows, which leaves the float32 weights as
# imported (an update of 1e-12 is below the resolution of every weight above 1e-5 in
# magnitude). $1: the finetuning config, $2: the run folder.
released_checkpoint() {
  if [[ ! -d "$2/checkpoints" ]]; then
    echo "experiment: $1's model as released -> $2"
    "$build"/darkformer train --config "$1" --set attention.kind=softmax \
      --set training.steps=1 --set schedule.warmup_steps=0 --set optimizer.lr=1e-12 --set data.seq_len=512 \
      --set training.eval_interval=1 --set training.eval_batches=4 \
      --set training.generate_tokens=0 --set training.checkpoint_interval=1 --set output.dir="$2"
  fi
}

# The probe of a released model's own queries and keys at m = $features (64, 128, 256) on 4
# validation batches of 4 x 512 debdocs tokens. $1: the experiment name, $2: the released run folder.
features=64,128,256
probe_released() {
  local out=runs/experiments/$1 released=$2
  shift 2
  mkdir -p "$out"
  "$build"/darkformer probe --checkpoint "$released" --features "$features" --batches 4 --redraws 4 \
    --set training.device=cpu --json "$out/probe.json" "$@" | tee "$out/probe.txt"
}

jobs=${JOBS:-2}
case "$name" in
  gemma3_probe | smollm2_probe | gemma3_probe_window | smollm2_probe_window)
    # Not sweeps: the probe at head dimension 256 (Gemma 3 270M) and 64 (SmolLM2-135M); the
    # _window ones at m = 64, every estimator with and without the exact window of 64 keys.
    if [[ $name == *_window ]]; then features=64; set -- --exact-window 64 "$@"; fi
    if [[ $name == gemma3_* ]]; then
      scripts/fetch-models.sh gemma3
      released_checkpoint configs/gemma3_finetune.json runs/gemma3-released
      probe_released "$name" runs/gemma3-released "$@"
    else
      scripts/fetch-models.sh
      released_checkpoint configs/smollm2_finetune.json runs/smollm2-released
      probe_released "$name" runs/smollm2-released "$@"
    fi
    exit 0
    ;;
  gemma3_*)
    scripts/fetch-models.sh gemma3
    jobs=${JOBS:-1}  # one 270M-parameter model already uses every core
    ;;
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
# The sweep's output folder, from its config: comments (// to the end of a line, /* */) are
# dropped outside strings, as darkformer's own reader does.
out=$(python3 -c 'import json,sys,re; t=open(sys.argv[1]).read(); t=re.sub(r"(\"(?:\\.|[^\"\\])*\")|//[^\n]*|/\*.*?\*/", lambda m: m.group(1) or "", t, flags=re.S); print(json.loads(t).get("output",""))' "$sweep")
"$build"/darkformer report "${out:-runs/sweeps/$name}"
echo "experiment $name: $(( ($(date +%s) - start) / 60 )) min; report in ${out:-runs/sweeps/$name}/report.md"
