#!/usr/bin/env bash
# export-hf of models with random-feature attention against Hugging Face transformers: tiny runs
# of every kind and setting the modeling file covers (Performer, LFK, DARKFormer with a rank
# below the head width, one M per layer and a variance-optimal proposal, DARKFormer with an
# exact window, Performer in mode exact, a per-layer mix), each trained a few steps with
# redraws so that its features are those of a later epoch, then the Gemma 3 270M global-arm
# swap (DARKFormer with an exact window on layers 5, 11, 17) after one finetuning step. Each
# folder is exported and checked by tests/reference/check_hf_export_kinds.py (loads as
# DarkformerForCausalLM with trust_remote_code; float32 logits within 1e-4 of ours (Gemma 3: 1e-5
# of its largest logit, ~150), unpadded and
# left-padded) and check_hf_tokenizer.py (tokenizer ids, greedy text equal to `darkformer
# generate --temperature 0` on 3 prompts).
# Needs a Python with transformers, torch and tokenizers ($DARK_HF_PYTHON, else python3):
# without it prints "skipped: transformers not installed" and exits 77 (ctest shows it as
# skipped); the Gemma 3 part is skipped, saying so, without cache/models/gemma3.
# usage: hf_export_kinds_check.sh DARKFORMER HF_ENCODE HF_LOGITS SOURCE_DIR   (DARK_HF_KEEP=1 keeps its folder)
set -euo pipefail
darkformer="$1" encode="$2" logits="$3" src="$4"
py="${DARK_HF_PYTHON:-python3}"
if ! "$py" -c "import transformers, torch, tokenizers, numpy" > /dev/null 2>&1; then
  echo "skipped: transformers not installed (for $py; set DARK_HF_PYTHON to a Python that has transformers," \
       "torch, tokenizers and numpy)"
  exit 77
fi
"$py" -c "import transformers, torch; print('transformers', transformers.__version__, '| torch', torch.__version__)"
tmp="$(mktemp -d)"
[ -n "${DARK_HF_KEEP:-}" ] && echo "keeping $tmp" || trap 'rm -rf "$tmp"' EXIT

mkdir -p "$tmp/corpus"
for d in 0 1 2; do
  for i in $(seq 1 60); do
    echo "Document $d line $i: the quick brown fox jumps over the lazy dog $((d * 1000 + i)) times."
  done > "$tmp/corpus/doc$d.txt"
done
prompts=(--prompt "The capital of France is" --prompt "Document 1 line" --prompt "the lazy")

failures=0
check() {  # NAME RUN_DIR RELATIVE_TOLERANCE EXTRA_ARGS_FOR_TOKENIZER_CHECK...
  local name="$1" run="$2" relative="$3"
  shift 3
  echo "== $name"
  "$darkformer" export-hf --checkpoint "$run" --out "$tmp/hf-$name"
  "$py" "$src/tests/reference/check_hf_export_kinds.py" "$tmp/hf-$name" --logits "$logits" --checkpoint "$run" \
      --relative "$relative" || failures=$((failures + 1))
  "$py" "$src/tests/reference/check_hf_tokenizer.py" "$tmp/hf-$name" --encode "$encode" --darkformer "$darkformer" \
      --checkpoint "$run" "$@" || failures=$((failures + 1))
}

# name | attention section (head width 8, so m = 16 features; 30 steps, redraws every 8: epoch 3)
runs=(
  'performer|{"kind": "performer", "num_features": 16, "redraw_interval": 8}'
  'lfk|{"kind": "lfk", "num_features": 16}'
  'darkformer-rank4-proposal|{"kind": "darkformer", "num_features": 16, "redraw_interval": 8, "proposal": "variance_optimal", "darkformer": {"rank": 4, "scope": "layer", "init": "whiten"}}'
  'darkformer-window|{"kind": "darkformer", "num_features": 16, "redraw_interval": 8, "exact_window": 8}'
  'performer-exact|{"kind": "performer", "mode": "exact"}'
  'mixed|{"kind": "lfk", "num_features": 16, "exact_window": 5, "layers": {"0": {"kind": "softmax", "exact_window": 0}}}'
)
for entry in "${runs[@]}"; do
  name="${entry%%|*}" attention="${entry#*|}"
  cat > "$tmp/$name.json" <<EOF
{
  "model": {"d_model": 32, "n_layers": 2, "n_heads": 4, "n_kv_heads": 2, "d_ff": 64, "tie_embeddings": false},
  "attention": $attention,
  "data": {"tokenizer": "byte", "sources": ["$tmp/corpus"], "dir": "$tmp/data", "seq_len": 64, "val_windows": 2,
           "val_fraction": 0.34},
  "optimizer": {"lr": 0.01},
  "schedule": {"warmup_steps": 2},
  "training": {"steps": 30, "batch_size": 4, "eval_interval": 30, "eval_batches": 1, "checkpoint_interval": 30,
               "log_interval": 30, "generate_tokens": 0},
  "output": {"dir": "$tmp/run-$name"},
  "seed": 3
}
EOF
  "$darkformer" train --config "$tmp/$name.json" > "$tmp/train-$name.log" 2>&1 || { cat "$tmp/train-$name.log"; exit 1; }
  check "$name" "$tmp/run-$name" 0 --data "$tmp/data" --max-tokens 16 "${prompts[@]}"
done

gguf="$src/cache/models/gemma3/gemma-3-270m-q4_k_m.gguf"
if [ -f "$gguf" ]; then
  # The global arm of docs/finetuning.md's recipe (the exact window 8 here, so that the far
  # part acts within the 32-token context), one finetuning step: the 262k-token head makes
  # each token ~1 GFLOP.
  cat > "$tmp/gemma3.json" <<JSON
{
  "finetune": {"init_from": "$gguf", "trainable": ["model.norm.weight", "*.feature_map.*"]},
  "attention": {"kind": "darkformer", "exact_window": 8},
  "data": {"sources": ["$tmp/corpus"], "dir": "$tmp/data-gemma3", "seq_len": 32, "val_windows": 1, "val_fraction": 0.34},
  "optimizer": {"lr": 1e-4, "weight_decay": 0.0},
  "schedule": {"warmup_steps": 0},
  "training": {"steps": 1, "batch_size": 1, "eval_interval": 1, "eval_batches": 1, "checkpoint_interval": 1,
               "log_interval": 1, "generate_tokens": 0},
  "output": {"dir": "$tmp/run-gemma3"},
  "seed": 1
}
JSON
  "$darkformer" train --config "$tmp/gemma3.json" > "$tmp/train-gemma3.log" 2>&1 ||
    { cat "$tmp/train-gemma3.log"; exit 1; }
  # Logits up to ~150: within 1e-5 of the largest (float32 alone is 2.7e-4 off there).
  check gemma3-global-darkformer "$tmp/run-gemma3" 1e-5 --data "$tmp/data-gemma3" --max-tokens 12 \
      --prompt "The capital of France is" --prompt "def fibonacci(n):" --prompt "Once upon a time"
else
  echo "not run: the Gemma 3 part (no $gguf; scripts/fetch-models.sh gemma3 fetches it)"
fi
echo "$([ $failures -eq 0 ] && echo OK || echo "FAILED: $failures check(s)")"
exit $((failures > 0))
