#!/usr/bin/env bash
# Attention benchmarks: builds darkformer_bench_attention (Release), runs it (forward +
# backward time and peak memory of softmax, performer, lfk and darkformer against L, with
# its targets), then runs the same causal FAVOR+ written the usual PyTorch way
# (bench/torch_attention.py: performer-pytorch's softmax_kernel and cumsum
# causal_linear_attention_noncuda, Debian's python3-torch) on the same shapes with the same
# thread count, and prints one table: ours vs PyTorch per (m, L), with PASS/FAIL.
# darkformer times all kinds of one L in one child process, alternating round by round,
# and measures memory in one child per configuration; PyTorch runs one child per
# configuration (peak RSS per configuration). --rounds N repeats both sides N times,
# alternating, and reports medians over the rounds. The machine should be idle: the load
# average is printed, with a warning when other processes compete for the cores.
# Logs and JSON go to cache/bench/attention-<date>/ (ignored by git).
#
# Env: BUILD_DIR (default build), JOBS (parallel build jobs, default 2).
# Exit: 0 when both sides ran (a missed target is reported, not fatal, unless --strict),
# 1 when a side failed (or --strict and a target is missed), 2 on a bad command line.
set -euo pipefail
cd "$(dirname "$0")/.."

threads=2
wait_policy=passive
reps=5
rounds=1
features="64,256"
kinds="softmax,performer,lfk,darkformer"
lens=""
max_len=32768
budget_s=120
mem_budget_gib=8
torch_side=1
strict=0
json_out=""
out_dir=""
usage() {
  cat << 'EOF'
usage: scripts/bench_attention.sh [flags]
Forward + backward time and peak memory of the attention kinds against sequence length,
and darkformer's causal FAVOR+ against the usual PyTorch version (performer-pytorch's).

  --threads N        OpenMP threads for both sides (default 2; PyTorch: torch threads and
                     OpenBLAS threads)
  --omp-wait-policy P
                     OMP_WAIT_POLICY for both sides: passive (default), active, or env (keep
                     the environment's, normally unset = the OpenMP runtime's spin-then-sleep,
                     what training uses). With env, when any other process competes for the
                     cores, spinning threads collapse multi-threaded times (3-50x measured on
                     2 shared cores), so passive is the default; on an idle machine env is
                     faster for both sides (passive adds a thread wake-up to every parallel
                     region: up to 2x at small L)
  --features LIST    random-feature counts (default 64,256)
  --kinds LIST       darkformer kinds (default softmax,performer,lfk,darkformer)
  --lens LIST        sequence lengths (default powers of two 256 .. --max-len)
  --max-len N        (default 32768)
  --reps N           timed repetitions (default 5; 3 when a call takes >= 1 s)
  --rounds N         run both sides N times, alternating, and report per configuration
                     the median over rounds (default 1; memory is measured in round 1)
  --budget-s S       skip a configuration predicted to take longer (default 120; softmax
                     at 32768 takes ~1 min on 2 cores, the whole default run ~8 min)
  --mem-budget-gib G PyTorch: skip configurations whose estimated peak (3.2 x the B H L m d
                     float32 tensor) exceeds G GiB (default 8: m = 256 stops at L = 8192)
  --quick            --max-len 4096 --reps 3, for a smoke test
  --no-torch         darkformer side only
  --out-dir DIR      logs and JSON (default cache/bench/attention-<date>)
  --json PATH        also copy the combined results (both sides, comparison) to PATH
  --strict           exit 1 when a target is missed
  --help             print this message

Env: BUILD_DIR (default build), JOBS (build jobs, default 2). The machine should be
otherwise idle: the load average is printed before and after each side.
EOF
}
while [[ $# -gt 0 ]]; do
  case "$1" in
    --threads) threads="${2:?--threads needs a value}"; shift 2 ;;
    --omp-wait-policy) wait_policy="${2:?--omp-wait-policy needs a value}"; shift 2 ;;
    --features) features="${2:?--features needs a value}"; shift 2 ;;
    --kinds) kinds="${2:?--kinds needs a value}"; shift 2 ;;
    --lens) lens="${2:?--lens needs a value}"; shift 2 ;;
    --max-len) max_len="${2:?--max-len needs a value}"; shift 2 ;;
    --reps) reps="${2:?--reps needs a value}"; shift 2 ;;
    --rounds) rounds="${2:?--rounds needs a value}"; shift 2 ;;
    --budget-s) budget_s="${2:?--budget-s needs a value}"; shift 2 ;;
    --mem-budget-gib) mem_budget_gib="${2:?--mem-budget-gib needs a value}"; shift 2 ;;
    --quick) max_len=4096; reps=3; shift ;;
    --no-torch) torch_side=0; shift ;;
    --out-dir) out_dir="${2:?--out-dir needs a value}"; shift 2 ;;
    --json) json_out="${2:?--json needs a value}"; shift 2 ;;
    --strict) strict=1; shift ;;
    -h | --help) usage; exit 0 ;;
    *) echo "bench_attention.sh: unknown flag '$1'" >&2; usage >&2; exit 2 ;;
  esac
done
[[ "$threads" =~ ^[1-9][0-9]*$ ]] || { echo "bench_attention.sh: --threads wants a positive integer, got '$threads'" >&2; exit 2; }
[[ "$reps" =~ ^[1-9][0-9]*$ ]] || { echo "bench_attention.sh: --reps wants a positive integer, got '$reps'" >&2; exit 2; }
[[ "$rounds" =~ ^[1-9][0-9]*$ ]] || { echo "bench_attention.sh: --rounds wants a positive integer, got '$rounds'" >&2; exit 2; }
case "$wait_policy" in
  passive | active) export OMP_WAIT_POLICY="${wait_policy^^}" ;;
  env) ;;
  *) echo "bench_attention.sh: --omp-wait-policy wants passive, active or env, got '$wait_policy'" >&2; exit 2 ;;
esac

# ---- build ----
build_dir="${BUILD_DIR:-build}"
cmake -S . -B "$build_dir" -DCMAKE_BUILD_TYPE=Release -DDARK_BUILD_BENCH=ON > /dev/null
cmake --build "$build_dir" -j "${JOBS:-2}" --target darkformer_bench_attention > /dev/null
bench="$build_dir/bench/darkformer_bench_attention"

out_dir="${out_dir:-cache/bench/attention-$(date +%Y%m%d-%H%M%S)}"
mkdir -p "$out_dir"
cpu="$(lscpu 2> /dev/null | sed -n 's/^Model name: *//p' | head -n 1)"
# Other runnable tasks now (procs_running counts the reader itself): the median of 5 samples.
busy="$(for _ in 1 2 3 4 5; do
  while read -r key value _; do [[ $key == procs_running ]] && echo $((value - 1)); done < /proc/stat
  sleep 0.2
done | sort -n | sed -n 3p)"
echo "CPU: ${cpu:-unknown}, $(nproc) cores; threads $threads (OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-unset}); logs in $out_dir"
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
if [[ "${busy:-0}" -ge 1 && "${OMP_WAIT_POLICY:-}" != PASSIVE ]]; then
  echo "warning: $busy other runnable process(es): with spinning OpenMP threads, multi-threaded"
  echo "times collapse under contention; wait for an idle machine or use --omp-wait-policy passive"
fi
echo

lens_args=(--max-len "$max_len")
[[ -n "$lens" ]] && lens_args=(--lens "$lens")
failed=0

torch_ok=0
if [[ $torch_side == 1 ]]; then
  if /usr/bin/python3 -c "import torch" 2> /dev/null; then
    torch_ok=1
  else
    echo "PyTorch side skipped: /usr/bin/python3 cannot import torch (Debian: apt-get install python3-torch;"
    echo "scripts/bench_train.sh installs it)."
    echo
    torch_side=0
  fi
fi

# Rounds alternate the sides (darkformer, PyTorch, darkformer, ...), so a background load
# that comes and goes reaches both; each configuration reports the median over rounds.
dark_files=""
for ((round = 1; round <= rounds; round++)); do
  [[ $rounds -gt 1 ]] && echo "==== round $round of $rounds ===="
  # ---- darkformer (memory is measured in the first round only) ----
  memory_args=()
  [[ $round -gt 1 ]] && memory_args=(--no-memory)
  if ! OMP_NUM_THREADS="$threads" "$bench" --threads "$threads" --kinds "$kinds" --features "$features" \
      "${lens_args[@]}" --reps "$reps" --budget-s "$budget_s" "${memory_args[@]}" --json "$out_dir/darkformer.$round.json" \
      2> >(tee "$out_dir/darkformer.$round.progress" >&2) | tee "$out_dir/darkformer.$round.log"; then
    echo "darkformer side failed (see $out_dir/darkformer.$round.progress)" >&2
    failed=1
  fi
  dark_files="${dark_files:+$dark_files,}$out_dir/darkformer.$round.json"
  # ---- PyTorch ----
  if [[ $torch_ok == 1 ]]; then
    echo
    echo "PyTorch side (causal FAVOR+ as performer-pytorch writes it); load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
    if ! /usr/bin/python3 bench/torch_attention.py --threads "$threads" --omp-wait-policy "${wait_policy/env/default}" \
        --features "$features" "${lens_args[@]}" --reps "$reps" --budget-s "$budget_s" \
        --mem-budget-gib "$mem_budget_gib" > "$out_dir/pytorch.$round.jsonl" 2> >(tee "$out_dir/pytorch.$round.progress" >&2); then
      echo "PyTorch side failed (see $out_dir/pytorch.$round.progress)" >&2
      failed=1
    fi
    echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
    echo
  fi
done
if [[ $rounds -gt 1 ]]; then
  echo "==== median over $rounds rounds ===="
  "$bench" --merge "$dark_files" --json "$out_dir/darkformer.json" | tee "$out_dir/darkformer.log"
else
  cp "$out_dir/darkformer.1.json" "$out_dir/darkformer.json" 2> /dev/null || true
fi

set +e
/usr/bin/python3 - "$out_dir" "$torch_side" "$strict" "$failed" "$json_out" << 'EOF' | tee "$out_dir/comparison.txt"
import json, os, statistics, sys

out_dir, torch_side, strict, failed, json_out = sys.argv[1], sys.argv[2] == "1", sys.argv[3] == "1", sys.argv[4] == "1", sys.argv[5]
ours = json.load(open(os.path.join(out_dir, "darkformer.json"))) if os.path.exists(os.path.join(out_dir, "darkformer.json")) else {"rows": [], "summary": []}
verdicts = [s["verdict"] for s in ours.get("summary", []) if "verdict" in s]
combined = {"darkformer": ours, "pytorch": [], "comparison": []}
if torch_side:
    runs = {}  # (m, L) -> rows of every round
    for name in sorted(os.listdir(out_dir)):
        if name.startswith("pytorch.") and name.endswith(".jsonl"):
            for line in open(os.path.join(out_dir, name)):
                if line.strip():
                    r = json.loads(line)
                    runs.setdefault((r["m"], r["L"]), []).append(r)
    theirs = []
    for key, rs in sorted(runs.items()):
        timed = [r for r in rs if "ms" in r]
        if not timed:
            theirs.append(rs[0])
            continue
        merged = dict(timed[0])
        merged["ms"] = statistics.median(r["ms"] for r in timed)
        merged["ms_per_run"] = [r["ms"] for r in timed]
        merged["ms_min"] = min(r["ms_min"] for r in timed)
        merged["ms_max"] = max(r["ms_max"] for r in timed)
        merged["peak_rss_growth_mib"] = max(r["peak_rss_growth_mib"] for r in timed)
        theirs.append(merged)
    combined["pytorch"] = theirs
    ours_by = {(r["kind"], r["m"], r["L"]): r for r in ours["rows"] if "ms" in r and "ref_of" not in r}
    torch_by = {(r["m"], r["L"]): r for r in theirs}
    print()
    print("darkformer vs PyTorch (causal FAVOR+, performer-pytorch's cumsum form), fwd+bwd median ms; "
          "memory: peak RSS growth during the first call (MiB)")
    header = ["m", "L", "performer ms", "darkformer ms", "pytorch ms", "pytorch/performer", "pytorch/darkformer",
              "performer RSS+", "darkformer RSS+", "pytorch RSS+"]
    rows = []
    for (m, L), t in sorted(torch_by.items()):
        p, d = ours_by.get(("performer", m, L)), ours_by.get(("darkformer", m, L))
        if "ms" not in t:
            rows.append([str(m), str(L), f'{p["ms"]:.1f}' if p else "-", f'{d["ms"]:.1f}' if d else "-", t.get("skipped", "-")])
            continue
        rp = t["ms"] / p["ms"] if p else None
        rd = t["ms"] / d["ms"] if d else None
        combined["comparison"].append({"m": m, "L": L, "pytorch_ms": t["ms"], "performer_ms": p["ms"] if p else None,
                                       "darkformer_ms": d["ms"] if d else None, "pytorch_over_performer": rp,
                                       "pytorch_over_darkformer": rd})
        rows.append([str(m), str(L), f'{p["ms"]:.1f}' if p else "-", f'{d["ms"]:.1f}' if d else "-", f'{t["ms"]:.1f}',
                     f"{rp:.2f}x" if rp else "-", f"{rd:.2f}x" if rd else "-",
                     f'{p["peak_rss_growth_mib"]:.0f}' if p else "-", f'{d["peak_rss_growth_mib"]:.0f}' if d else "-",
                     f'{t["peak_rss_growth_mib"]:.0f}'])
    width = [max([len(h)] + [len(r[i]) for r in rows if len(r) == len(header)]) for i, h in enumerate(header)]
    fmt = lambda r: " | ".join(v.rjust(width[i]) for i, v in enumerate(r))
    print(fmt(header))
    print("-" * len(fmt(header)))
    for r in rows:
        print(fmt(r) if len(r) == len(header) else fmt(r[:4]) + " | " + r[4])
    print("(pytorch/ours > 1: ours is faster)")
    print()
    for side in ("performer", "darkformer"):
        for m in sorted({m for m, _ in torch_by}):
            vals = [c[f"pytorch_over_{side}"] for c in combined["comparison"] if c["m"] == m and c[f"pytorch_over_{side}"]]
            if not vals:
                continue
            worst, med = min(vals), statistics.median(vals)
            verdict = "PASS" if worst >= 3.0 else "FAIL"
            verdicts.append(verdict)
            print(f"{side + ' vs PyTorch FAVOR+  m=' + str(m):<40} worst {worst:6.2f}x  median {med:6.2f}x  "
                  f"(over {len(vals)} lengths)  target >= 3x at every length  {verdict}")
if json_out:
    with open(json_out, "w") as f:
        json.dump(combined, f, indent=1)
with open(os.path.join(out_dir, "combined.json"), "w") as f:
    json.dump(combined, f, indent=1)
missed = any(v == "FAIL" for v in verdicts)
print()
print(f"{verdicts.count('PASS')} targets PASS, {verdicts.count('FAIL')} FAIL, {verdicts.count('n/a')} n/a; results in {out_dir}")
sys.exit(1 if failed or (strict and missed) else 0)
EOF
status=${PIPESTATUS[0]}
exit "$status"
