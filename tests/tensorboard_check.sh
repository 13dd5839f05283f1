#!/usr/bin/env bash
# TensorBoard reads our event files (train/run_events.h): tests/reference/check_tensorboard.py
# reads a run folder with the tensorboard package's EventAccumulator and compares every scalar
# with metrics.jsonl, on
#   1. a short Performer run (training and evaluation lines, redraw shocks every 10 steps,
#      attention statistics every 5, the config and the sample as text);
#   2. a finetuning run of run 1 with an attention transfer (transfer.json's numbers);
#   3. a run killed with kill -9 after its first checkpoints, then resumed with --resume: the
#      killed file ends wherever the kill found it (past its latest checkpoint), the resumed
#      file restarts after that checkpoint, and TensorBoard must see each step once, with the
#      values metrics.jsonl keeps.
#   Run 3 is also read through the viewer users open: a `tensorboard --logdir` server (its Rust
#   data server, which handles a restart by its own rules) asked over its HTTP API.
# tensorboard (pinned below) comes from PyPI into an ignored venv (cache/venv-tensorboard, made
# once, ~30 s). A failed install is a failure; only where PyPI cannot be reached at all does
# this print "skipped: ..." and exit 77 (ctest: skipped).
# usage: tensorboard_check.sh DARKFORMER SOURCE_DIR
set -euo pipefail
darkformer="$1" src="$2"
version=2.21.0 data_server=0.7.2  # what is checked (the viewer and its Rust data server); bump deliberately
venv="$src/cache/venv-tensorboard"
if ! "$venv/bin/python" -c "import sys, tensorboard; sys.exit(tensorboard.__version__ != '$version')" 2> /dev/null; then
  rm -rf "$venv"
  python3 -m venv "$venv" > /dev/null || { echo "FAILED: python3 -m venv failed (python3-venv missing: scripts/install-deps.sh)"; exit 1; }
  if ! "$venv/bin/pip" install -q "tensorboard==$version" "tensorboard-data-server==$data_server" > "$venv.log" 2>&1; then
    cat "$venv.log"
    rm -rf "$venv"
    if ! python3 -c "import urllib.request; urllib.request.urlopen('https://pypi.org/simple/tensorboard/', timeout=20)" \
        2> /dev/null; then
      echo "skipped: PyPI cannot be reached, so tensorboard $version cannot be installed"
      exit 77
    fi
    echo "FAILED: pip could not install tensorboard==$version although PyPI answers (log above)"
    exit 1
  fi
fi
"$venv/bin/python" -c "import tensorboard; print('tensorboard', tensorboard.__version__)"
tmp="$(mktemp -d)"
trap 'kill -9 $(jobs -p) 2> /dev/null || true; [ -n "${DARK_TB_KEEP:-}" ] && echo "kept $tmp" || rm -rf "$tmp"' EXIT

mkdir -p "$tmp/corpus"
for d in 0 1 2; do
  for i in $(seq 1 80); do echo "Document $d line $i: the quick brown fox jumps over the lazy dog $((d * 100 + i))."; done \
    > "$tmp/corpus/doc$d.txt"
done
config() {  # NAME STEPS
  cat > "$tmp/$1.json" <<JSON
{
  "model": {"d_model": 32, "n_layers": 2, "n_heads": 4, "n_kv_heads": 2, "d_ff": 64},
  "attention": {"kind": "performer", "num_features": 16, "redraw_interval": 10},
  "data": {"tokenizer": "byte", "sources": ["$tmp/corpus"], "dir": "$tmp/data", "seq_len": 32, "val_windows": 2,
           "val_fraction": 0.34},
  "schedule": {"warmup_steps": 2},
  "training": {"steps": $2, "batch_size": 2, "eval_interval": 10, "eval_batches": 1, "checkpoint_interval": 20,
               "log_interval": 5, "generate_tokens": 8},
  "output": {"dir": "$tmp/$1"},
  "seed": 4
}
JSON
}

status=0
config short 40
"$darkformer" train --config "$tmp/short.json" > "$tmp/short.log" 2>&1 || { cat "$tmp/short.log"; exit 1; }
"$venv/bin/python" "$src/tests/reference/check_tensorboard.py" "$tmp/short" --sample || status=1

# 2. A finetuning run with an attention transfer (from run 1's weights): transfer.json's numbers
#    at step 0.
cat > "$tmp/transfer.json" <<JSON
{
  "finetune": {"init_from": "$tmp/short", "transfer": {"steps": 5, "eval_batches": 1}},
  "attention": {"kind": "darkformer", "num_features": 16},
  "data": {"tokenizer": "byte", "sources": ["$tmp/corpus"], "dir": "$tmp/data", "seq_len": 32, "val_windows": 2,
           "val_fraction": 0.34},
  "schedule": {"warmup_steps": 2},
  "training": {"steps": 10, "batch_size": 2, "eval_interval": 10, "eval_batches": 1, "log_interval": 5,
               "generate_tokens": 0},
  "output": {"dir": "$tmp/transfer"},
  "seed": 4
}
JSON
"$darkformer" train --config "$tmp/transfer.json" > "$tmp/transfer.log" 2>&1 || { cat "$tmp/transfer.log"; exit 1; }
"$venv/bin/python" "$src/tests/reference/check_tensorboard.py" "$tmp/transfer" || status=1

# Killed with kill -9 once it has a checkpoint and 25 logged steps (a step takes ~1 ms here,
# so wherever it is then), then resumed to 40 steps past its latest checkpoint.
config killed 1000000
"$darkformer" train --config "$tmp/killed.json" > "$tmp/killed.log" 2>&1 &
pid=$!
for _ in $(seq 1 600); do
  [ -d "$tmp/killed/checkpoints/step_00000020" ] && [ "$(grep -c '"loss"' "$tmp/killed/metrics.jsonl" 2> /dev/null)" -ge 25 ] && break
  sleep 0.05
done
kill -9 "$pid" || { cat "$tmp/killed.log"; echo "FAILED: the run ended before the kill"; exit 1; }
wait "$pid" 2> /dev/null || true
# Completed checkpoints only: the kill may land while one is written (step_N.tmp-PID is left).
latest=$(ls "$tmp/killed/checkpoints" | grep -E '^step_[0-9]+$' | sed 's/step_0*//' | sort -n | tail -n 1)
echo "killed at step $(tail -n 1 "$tmp/killed/metrics.jsonl" | grep -o '"step":[0-9]*' | cut -d: -f2) (metrics line" \
     "$(wc -l < "$tmp/killed/metrics.jsonl"), latest checkpoint $latest); resuming to step $((latest + 40))"
sed -i "s/\"steps\": 1000000/\"steps\": $((latest + 40))/" "$tmp/killed.json"
"$darkformer" train --config "$tmp/killed.json" --resume > "$tmp/resumed.log" 2>&1 || { cat "$tmp/resumed.log"; exit 1; }
"$venv/bin/python" "$src/tests/reference/check_tensorboard.py" "$tmp/killed" --sample --server "$venv/bin/tensorboard" ||
  status=1
exit $status
