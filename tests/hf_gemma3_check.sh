#!/usr/bin/env bash
# export-hf of a Gemma 3 run against Hugging Face transformers: a one-step finetune of Gemma 3
# 270M (cache/models/gemma3/gemma-3-270m-q4_k_m.gguf, its own GGUF tokenizer) on a tiny corpus,
# exported, then tests/reference/check_hf_tokenizer.py: the folder loads as Gemma3ForCausalLM
# with AutoTokenizer from its tokenizer.json alone; transformers' ids equal ours on the usual
# strings plus Gemma's user-defined-token texts; greedy text equals `darkformer generate
# --temperature 0`'s on a few prompts.
# Needs a Python with transformers, torch and tokenizers ($DARK_HF_PYTHON, else python3) and
# the model file (scripts/fetch-models.sh gemma3); without either it prints "skipped: ..." and
# exits 77, which ctest (test hf_gemma3_check, SKIP_RETURN_CODE 77) shows as skipped.
# The 262k-token LM head makes each token ~1 GFLOP: one step of batch 1 x 32 tokens (the run's
# context, model.max_seq_len, is still the GGUF's 32768: generate reads every prompt whole).
# usage: hf_gemma3_check.sh DARKFORMER HF_ENCODE SOURCE_DIR   (DARK_HF_KEEP=1 keeps its temporary folder)
set -euo pipefail
darkformer="$1" encode="$2" src="$3"
py="${DARK_HF_PYTHON:-python3}"
gguf="$src/cache/models/gemma3/gemma-3-270m-q4_k_m.gguf"
if ! "$py" -c "import transformers, torch, tokenizers" > /dev/null 2>&1; then
  echo "skipped: transformers not installed (for $py; set DARK_HF_PYTHON to a Python that has transformers," \
       "torch and tokenizers)"
  exit 77
fi
if [ ! -f "$gguf" ]; then
  echo "skipped: no $gguf (scripts/fetch-models.sh gemma3 fetches it)"
  exit 77
fi
"$py" -c "import transformers, torch, tokenizers; print('transformers', transformers.__version__, '| torch', \
torch.__version__, '| tokenizers', tokenizers.__version__)"
tmp="$(mktemp -d)"
[ -n "${DARK_HF_KEEP:-}" ] && echo "keeping $tmp" || trap 'rm -rf "$tmp"' EXIT

mkdir -p "$tmp/corpus"
for d in 0 1 2; do
  for i in $(seq 1 40); do
    echo "Document $d line $i: the quick brown fox jumps over the lazy dog; caf\u00e9 $((d * 1000 + i))."
  done > "$tmp/corpus/doc$d.txt"
done

cat > "$tmp/gemma3.json" <<JSON
{
  "finetune": {"init_from": "$gguf", "trainable": ["model.norm.weight"]},
  "attention": {"kind": "softmax"},
  "data": {"sources": ["$tmp/corpus"], "dir": "$tmp/data", "seq_len": 32, "val_windows": 1, "val_fraction": 0.34},
  "optimizer": {"lr": 1e-6, "weight_decay": 0.0},
  "schedule": {"warmup_steps": 0},
  "training": {"steps": 1, "batch_size": 1, "eval_interval": 1, "eval_batches": 1, "checkpoint_interval": 1,
               "log_interval": 1, "generate_tokens": 0},
  "output": {"dir": "$tmp/run"},
  "seed": 1
}
JSON
"$darkformer" train --config "$tmp/gemma3.json" > "$tmp/train.log" 2>&1 || { cat "$tmp/train.log"; exit 1; }
"$darkformer" export-hf --checkpoint "$tmp/run" --out "$tmp/hf"
for f in tokenizer.json tokenizer_config.json special_tokens_map.json; do
  [ -f "$tmp/hf/$f" ] || { echo "FAILED: export-hf wrote no $f for the Gemma 3 run"; exit 1; }
done
"$py" "$src/tests/reference/check_hf_tokenizer.py" "$tmp/hf" --encode "$encode" --data "$tmp/data" \
    --darkformer "$darkformer" --checkpoint "$tmp/run" --max-tokens 12 --gemma-strings \
    --prompt "The capital of France is" --prompt "def fibonacci(n):" --prompt "Once upon a time"
