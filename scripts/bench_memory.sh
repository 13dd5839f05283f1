#!/usr/bin/env bash
# The memory pre-flight's estimate against the measured peak: trains a few steps of each
# config (default: configs/quickstart.json, configs/small.json and a tiny model) under each
# attention kind (softmax, performer, lfk, darkformer), one `darkformer train` child process
# per point, and prints one table: config | attention | estimate MiB | peak RSS MiB |
# estimate / peak, with pass/FAIL against the target (within 25%), and the CPU model. The
# estimate is the one the run logs at start-up ("memory: estimated peak"); the peak is the
# child's maximum resident set as GNU time reports it (the run's own end line, from VmHWM,
# when GNU time is missing). Each run includes its final evaluation and checkpoint.
#
# Env: BUILD_DIR (default build; darkformer must be built there).
# Exit: 0 when every point ran (a missed target is reported, not fatal, unless --strict),
# 1 when a run failed (or --strict and a target is missed), 2 on a bad command line.
set -euo pipefail
cd "$(dirname "$0")/.."

steps=3
strict=0
configs=""
kinds="softmax performer lfk darkformer"
extra=()
usage() {
  cat << 'EOF'
usage: scripts/bench_memory.sh [flags]
Compares the memory pre-flight's estimate with the measured peak resident set.

  --steps N        training steps per run (default 3)
  --config FILE    a config to measure (repeatable; default quickstart, small and tiny,
                   "tiny" being the quickstart at d_model 64, 2 layers, seq_len 64, batch 8)
  --kinds "L"      attention kinds (default "softmax performer lfk darkformer")
  --set KEY=VALUE  passed to every run (repeatable), e.g. --set data.corpus=debdocs-python
                   to measure small.json's model on the quickstart's prepared data
  --strict         exit 1 when a point misses the target
EOF
}
while [[ $# -gt 0 ]]; do
  case "$1" in
    --steps) steps="$2"; shift 2 ;;
    --config) configs="$configs $2"; shift 2 ;;
    --kinds) kinds="$2"; shift 2 ;;
    --set) extra+=(--set "$2"); shift 2 ;;
    --strict) strict=1; shift ;;
    --help | -h) usage; exit 0 ;;
    *) echo "bench_memory.sh: unknown flag $1" >&2; usage >&2; exit 2 ;;
  esac
done
[[ -n "$configs" ]] || configs="configs/quickstart.json configs/small.json tiny"
[[ "$steps" =~ ^[1-9][0-9]*$ ]] || { echo "bench_memory.sh: --steps must be a positive integer, got $steps" >&2; exit 2; }

exe="${BUILD_DIR:-build}/darkformer"
[[ -x "$exe" ]] || { echo "bench_memory.sh: $exe not found: build the darkformer target first" >&2; exit 1; }
gnu_time=""
if /usr/bin/time -f %M true > /dev/null 2>&1; then gnu_time=/usr/bin/time; fi
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

echo "CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //'), $(nproc) cores"
printf '%-24s %-11s %12s %14s %10s  %s\n' config attention "estimate MiB" "peak RSS MiB" ratio target
failed=0
missed=0
for config in $configs; do
  args=(--config "$config")
  name="$(basename "$config" .json)"
  if [[ "$config" == tiny ]]; then
    args=(--config configs/quickstart.json --set model.d_model=64 --set model.n_heads=2 --set model.n_layers=2
          --set data.seq_len=64 --set training.batch_size=8)
  fi
  for kind in $kinds; do
    out="$work/$name-$kind"
    cmd=("$exe" train "${args[@]}" --set attention.kind="$kind" --set training.steps="$steps"
         --set schedule.warmup_steps=0 --set training.eval_interval=1000000 --set training.eval_batches=2
         --set training.generate_tokens=0 --set output.dir="$out" "${extra[@]}")
    if [[ -n "$gnu_time" ]]; then
      status=0; "$gnu_time" -f %M -o "$work/rss" "${cmd[@]}" > "$out.log" 2>&1 || status=$?
    else
      status=0; "${cmd[@]}" > "$out.log" 2>&1 || status=$?
    fi
    if [[ $status -ne 0 ]]; then
      echo "bench_memory.sh: $name / $kind failed (exit $status); its log:" >&2
      tail -5 "$out.log" >&2
      failed=1
      continue
    fi
    estimate="$(sed -n 's/.*memory: estimated peak \([0-9.]*\) MiB.*/\1/p' "$out.log" | head -1)"
    if [[ -n "$gnu_time" ]]; then
      peak="$(awk '{ printf "%.1f", $1 / 1024 }' "$work/rss")"
    else
      peak="$(sed -n 's/.*memory: peak resident set \([0-9.]*\) MiB.*/\1/p' "$out.log" | head -1)"
    fi
    ratio="$(awk -v e="$estimate" -v p="$peak" 'BEGIN { printf "%.2f", e / p }')"
    verdict="$(awk -v r="$ratio" 'BEGIN { print (r >= 0.75 && r <= 1.25) ? "pass" : "FAIL" }')"
    [[ "$verdict" == pass ]] || missed=1
    printf '%-24s %-11s %12s %14s %10s  %s\n' "$name" "$kind" "$estimate" "$peak" "$ratio" "$verdict (0.75 .. 1.25)"
  done
done
[[ $failed -eq 0 ]] || exit 1
[[ $strict -eq 0 || $missed -eq 0 ]] || exit 1
exit 0
