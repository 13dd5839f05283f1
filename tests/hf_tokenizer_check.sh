#!/usr/bin/env bash
# export-hf's tokenizer and generation config against Hugging Face transformers: trains three
# tiny runs (tokenizer sentencepiece, hf = byte-level BPE from tests/reference/hf_llama_tiny,
# and byte), exports each and runs tests/reference/check_hf_tokenizer.py on it.
# Needs a Python with transformers, torch, tokenizers and sentencepiece (protobuf is not needed:
# every folder loads from its tokenizer.json): $DARK_HF_PYTHON, else python3. Without them it prints "skipped: transformers not installed" and exits 77, which
# ctest (test hf_tokenizer_check, SKIP_RETURN_CODE 77) shows as skipped.
# usage: hf_tokenizer_check.sh DARKFORMER HF_ENCODE SOURCE_DIR   (DARK_HF_KEEP=1 keeps its temporary folder)
set -euo pipefail
darkformer="$1" encode="$2" src="$3"
py="${DARK_HF_PYTHON:-python3}"
if ! "$py" -c "import transformers, torch, tokenizers, sentencepiece" > /dev/null 2>&1; then
  echo "skipped: transformers not installed (for $py; set DARK_HF_PYTHON to a Python that has transformers," \
       "torch, tokenizers and sentencepiece)"
  exit 77
fi
"$py" -c "import transformers, torch, tokenizers; print('transformers', transformers.__version__, '| torch', \
torch.__version__, '| tokenizers', tokenizers.__version__)"
tmp="$(mktemp -d)"
[ -n "${DARK_HF_KEEP:-}" ] && echo "keeping $tmp" || trap 'rm -rf "$tmp"' EXIT

# A small corpus with what tokenizers get wrong: unicode, digits, whitespace runs, code.
"$py" - "$tmp/corpus" <<'EOF'
import os, random, sys
out = sys.argv[1]
os.makedirs(out)
rng = random.Random(0)
words = "the of and to in is was model token layer attention ka to ri ne su la mo caf\u00e9 \u00fcber \u65e5\u672c".split()
for d in range(3):
    lines = []
    for _ in range(300):
        line = " ".join(rng.choice(words) for _ in range(rng.randint(2, 12)))
        r = rng.random()
        if r < 0.2: line += " " + str(rng.randint(0, 10**6))
        elif r < 0.3: line = "    " + line + ":"
        elif r < 0.35: line += "  \t " + "\U0001f642"
        lines.append(line)
    open(os.path.join(out, f"doc{d}.txt"), "w", encoding="utf-8").write("\n".join(lines) + "\n")
EOF

status=0
for kind in sentencepiece hf byte; do
  case "$kind" in
    sentencepiece) data='"tokenizer": "sentencepiece", "vocab_size": 400' ;;
    hf) data="\"tokenizer\": \"hf\", \"tokenizer_model\": \"$src/tests/reference/hf_llama_tiny/tokenizer.json\"" ;;
    byte) data='"tokenizer": "byte"' ;;
  esac
  cat > "$tmp/$kind.json" <<EOF
{
  "model": {"d_model": 32, "n_layers": 2, "n_heads": 4, "n_kv_heads": 2, "d_ff": 64, "tie_embeddings": false},
  "data": {$data, "sources": ["$tmp/corpus"], "dir": "$tmp/data-$kind", "seq_len": 64, "val_windows": 4,
           "val_fraction": 0.34},
  "optimizer": {"lr": 0.01},
  "schedule": {"warmup_steps": 10},
  "training": {"steps": 80, "batch_size": 8, "eval_interval": 80, "eval_batches": 1, "checkpoint_interval": 80,
               "log_interval": 80, "generate_tokens": 0},
  "output": {"dir": "$tmp/run-$kind"},
  "seed": 1
}
EOF
  echo "== $kind"
  "$darkformer" train --config "$tmp/$kind.json" > "$tmp/train-$kind.log" 2>&1 || { cat "$tmp/train-$kind.log"; exit 1; }
  "$darkformer" export-hf --checkpoint "$tmp/run-$kind" --out "$tmp/hf-$kind"
  # Every kind gets a tokenizer.json: what transformers loads without sentencepiece or protobuf.
  [ -f "$tmp/hf-$kind/tokenizer.json" ] || { echo "FAILED: export-hf wrote no tokenizer.json for $kind"; status=1; }
  "$py" "$src/tests/reference/check_hf_tokenizer.py" "$tmp/hf-$kind" --encode "$encode" --data "$tmp/data-$kind" \
      --darkformer "$darkformer" --checkpoint "$tmp/run-$kind" || status=1
done
exit $status
