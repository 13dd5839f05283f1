#!/usr/bin/env bash
# Attention benchmarks: builds darkformer_bench_attention (Release), runs it (forward +
# backward time and peak memory of softmax, performer, lfk and darkformer against L, with
# its targets), then runs PyTorch peers on the same shapes with the same thread count
# (bench/torch_attention.py) and prints one table: ours vs each peer per (m, L), with
# PASS/FAIL. The peers:
#   * favor: the same causal FAVOR+ written the usual PyTorch way (performer-pytorch's
#     softmax_kernel and cumsum causal_linear_attention_noncuda), on the latest PyPI torch
#     (cache/venv-torch, made by scripts/torch-venv.sh; CPU use) and/or Debian's
#     python3-torch 1.13 (--torch); target: ours >= 3x faster at every L measured;
#   * darkformer-pytorch (PyPI, in the same environment): the closest peer of our
#     random-feature kinds, its causal chunked path, at its default chunk (256 tokens) and at
#     ours (64, attention.chunk_size's default; --dp-chunks); target: ours >= 3x faster than
#     its faster chunk at every L >= 2048.
# darkformer also runs each random-feature kind with attention.exact_window = W
# (--exact-window, default 64; 0 = off) and reports its time and memory over the kind's
# without it (target: <= 1.3x and <= 1.1x at m = 64, L 2048-32768); the PyTorch peers are
# compared with the kinds without the window.
# darkformer times all kinds of one L in one child process, alternating round by round,
# and measures memory in one child per configuration; each PyTorch peer runs one child per
# configuration (peak RSS per configuration). --rounds N repeats all sides N times,
# alternating, and reports medians over the rounds. The machine should be idle: the load
# average is printed, with a warning when other processes compete for the cores.
# Logs and JSON go to cache/bench/attention-<date>/ (ignored by git).
#
# Env: BUILD_DIR (default build), JOBS (parallel build jobs, default 2), SKIP_BUILD=1 (use
# the existing $BUILD_DIR/bench/darkformer_bench_attention, e.g. while someone else
# builds), TORCH_VENV (default cache/venv-torch).
# Exit: 0 when every side ran (a missed target is reported, not fatal, unless --strict),
# 1 when a side failed (or --strict and a target is missed), 2 on a bad command line.
set -euo pipefail
cd "$(dirname "$0")/.."

threads=2
wait_policy=passive
reps=5
rounds=1
features="64,256"
kinds="softmax,performer,lfk,darkformer"
exact_window=64
lens=""
max_len=32768
budget_s=120
mem_budget_gib=8
torch_sel=pypi
dp_chunks="256,64"
strict=0
json_out=""
out_dir=""
usage() {
  cat << 'EOF'
usage: scripts/bench_attention.sh [flags]
Forward + backward time and peak memory of the attention kinds against sequence length,
and our random-feature kinds against PyTorch peers: causal FAVOR+ written the usual
PyTorch way (performer-pytorch's) and darkformer-pytorch's causal chunked attention.

  --threads N        OpenMP threads for every side (default 2; Debian's PyTorch: torch
                     threads and OpenBLAS threads)
  --omp-wait-policy P
                     OMP_WAIT_POLICY for every side: passive (default), active, or env (keep
                     the environment's, normally unset = the OpenMP runtime's spin-then-sleep,
                     what training uses). With env, when any other process competes for the
                     cores, spinning threads collapse multi-threaded times (3-50x measured on
                     2 shared cores), so passive is the default; on an idle machine env is
                     faster for both sides (passive adds a thread wake-up to every parallel
                     region: up to 2x at small L)
  --features LIST    random-feature counts (default 64,256)
  --kinds LIST       darkformer kinds (default softmax,performer,lfk,darkformer)
  --exact-window W   darkformer also runs each random-feature kind with attention.exact_window
                     = W, timed in the same rounds, and reports t(W) / t(0) and mem(W) / mem(0)
                     (default 64; 0 = off)
  --lens LIST        sequence lengths, comma- or space-separated (default powers of two
                     256 .. --max-len)
  --max-len N        (default 32768)
  --reps N           timed repetitions (default 5; 3 when a call takes >= 1 s)
  --rounds N         run every side N times, alternating, and report per configuration
                     the median over rounds (default 1; memory is measured in round 1)
  --budget-s S       skip a configuration predicted to take longer (default 120; softmax
                     at 32768 takes ~1 min on 2 cores, the whole default run ~8 min)
  --mem-budget-gib G PyTorch: skip configurations whose estimated peak exceeds G GiB
                     (default 8; favor: 3.2 x the B H L m d float32 tensor, m = 256 stops
                     at L = 8192; darkformer-pytorch fits at every default L)
  --quick            --max-len 4096 --reps 3, for a smoke test
  --torch WHICH      the torch of the favor peer: pypi (default; the latest torch from PyPI
                     in cache/venv-torch, created when missing), debian (/usr/bin/python3's
                     1.13), both, or none (darkformer-pytorch always runs on the PyPI torch)
  --dp-chunks LIST   darkformer-pytorch's causal_chunk_size values (default 256,64: its
                     default and ours); none = no darkformer-pytorch peer
  --no-torch         darkformer side only (no PyTorch peer at all)
  --out-dir DIR      logs and JSON (default cache/bench/attention-<date>)
  --json PATH        also copy the combined results (every side, comparison) to PATH
  --strict           exit 1 when a target is missed
  --help             print this message

Env: BUILD_DIR (default build), JOBS (build jobs, default 2), SKIP_BUILD=1 (do not
build; use the existing darkformer_bench_attention), TORCH_VENV (default
cache/venv-torch). The machine should be otherwise idle: the load average is printed
before and after each side.
EOF
}
while [[ $# -gt 0 ]]; do
  case "$1" in
    --threads) threads="${2:?--threads needs a value}"; shift 2 ;;
    --omp-wait-policy) wait_policy="${2:?--omp-wait-policy needs a value}"; shift 2 ;;
    --features) features="${2:?--features needs a value}"; shift 2 ;;
    --kinds) kinds="${2:?--kinds needs a value}"; shift 2 ;;
    --exact-window) exact_window="${2:?--exact-window needs a value}"; shift 2 ;;
    --lens) lens="${2:?--lens needs a value}"; shift 2 ;;
    --max-len) max_len="${2:?--max-len needs a value}"; shift 2 ;;
    --reps) reps="${2:?--reps needs a value}"; shift 2 ;;
    --rounds) rounds="${2:?--rounds needs a value}"; shift 2 ;;
    --budget-s) budget_s="${2:?--budget-s needs a value}"; shift 2 ;;
    --mem-budget-gib) mem_budget_gib="${2:?--mem-budget-gib needs a value}"; shift 2 ;;
    --quick) max_len=4096; reps=3; shift ;;
    --torch) torch_sel="${2:?--torch needs a value}"; shift 2 ;;
    --dp-chunks) dp_chunks="${2:?--dp-chunks needs a value}"; shift 2 ;;
    --no-torch) torch_sel=none; dp_chunks=none; shift ;;
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
[[ "$exact_window" =~ ^[0-9]+$ ]] || { echo "bench_attention.sh: --exact-window wants an integer >= 0, got '$exact_window'" >&2; exit 2; }
case "$wait_policy" in
  passive | active) export OMP_WAIT_POLICY="${wait_policy^^}" ;;
  env) ;;
  *) echo "bench_attention.sh: --omp-wait-policy wants passive, active or env, got '$wait_policy'" >&2; exit 2 ;;
esac
case "$torch_sel" in
  pypi | debian | both | none) ;;
  *) echo "bench_attention.sh: --torch wants pypi, debian, both or none, got '$torch_sel'" >&2; exit 2 ;;
esac
# Lists may come space-separated (--lens "256 1024"); the programs take commas.
lens="$(echo "$lens" | tr -s ' ,' ',' | sed 's/^,//; s/,$//')"
features="$(echo "$features" | tr -s ' ,' ',' | sed 's/^,//; s/,$//')"
[[ -z "$lens" || "$lens" =~ ^[1-9][0-9]*(,[1-9][0-9]*)*$ ]] || { echo "bench_attention.sh: --lens wants positive integers, got '$lens'" >&2; exit 2; }
[[ "$features" =~ ^[1-9][0-9]*(,[1-9][0-9]*)*$ ]] || { echo "bench_attention.sh: --features wants positive integers, got '$features'" >&2; exit 2; }
[[ "$max_len" =~ ^[1-9][0-9]*$ ]] || { echo "bench_attention.sh: --max-len wants a positive integer, got '$max_len'" >&2; exit 2; }
[[ "$dp_chunks" == none ]] && dp_chunks=""
dp_chunks="$(echo "$dp_chunks" | tr -s ' ,' ' ')"
for c in $dp_chunks; do
  [[ "$c" =~ ^[1-9][0-9]*$ ]] || { echo "bench_attention.sh: --dp-chunks wants positive integers or none, got '$c'" >&2; exit 2; }
done

# ---- build ----
source scripts/bench-build.sh
bench_binary bench_attention.sh darkformer_bench_attention

out_dir="${out_dir:-cache/bench/attention-$(date +%Y%m%d-%H%M%S)}"
mkdir -p "$out_dir"
cpu="$(lscpu 2> /dev/null | sed -n 's/^Model name: *//p' | head -n 1)"
# Other runnable tasks now (procs_running counts the reader itself): the median of 5 samples.
busy="$(for _ in 1 2 3 4 5; do
  while read -r key value _; do [[ $key == procs_running ]] && echo $((value - 1)); done < /proc/stat
  sleep 0.2
done | sort -n | sed -n 3p)"
cpu_flags="$(grep -m 1 '^flags' /proc/cpuinfo 2> /dev/null || true)"
isa=""
for f in avx2 avx512f avx512_bf16 amx_tile; do
  if [[ " $cpu_flags " == *" $f "* ]]; then isa+=" $f"; else isa+=" no-$f"; fi
done
echo "CPU: ${cpu:-unknown}, $(nproc) cores;${isa}; threads $threads (OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-unset}); logs in $out_dir"
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
if [[ "${busy:-0}" -ge 1 && "${OMP_WAIT_POLICY:-}" != PASSIVE ]]; then
  echo "warning: $busy other runnable process(es): with spinning OpenMP threads, multi-threaded"
  echo "times collapse under contention; wait for an idle machine or use --omp-wait-policy passive"
fi
echo

lens_args=(--max-len "$max_len")
[[ -n "$lens" ]] && lens_args=(--lens "$lens")

# ---- the PyTorch peers: "id|label|python|torch_attention.py flags" ----
failed=0
peers=()
torch_python=""
if [[ $torch_sel == pypi || $torch_sel == both || -n "$dp_chunks" ]]; then
  if ! torch_python="$(scripts/torch-venv.sh)"; then
    echo "PyPI torch missing (scripts/torch-venv.sh failed): its peers are skipped" >&2
    failed=1
    torch_python=""
  fi
fi
if [[ -n "$torch_python" ]]; then
  pypi_version="$("$torch_python" -c 'import torch; print(torch.__version__)')"
  if [[ $torch_sel == pypi || $torch_sel == both ]]; then
    peers+=("favor-pypi|favor, PyTorch $pypi_version|$torch_python|--impl favor")
  fi
  dp_version="$("$torch_python" -c 'import darkformer_pytorch; print(darkformer_pytorch.__version__)')"
  for c in $dp_chunks; do
    peers+=("dkfpt-c$c|darkformer-pytorch $dp_version chunk $c (torch $pypi_version)|$torch_python|--impl darkformer-pytorch --causal-chunk-size $c")
  done
fi
if [[ $torch_sel == debian || $torch_sel == both ]]; then
  if /usr/bin/python3 -c "import torch" 2> /dev/null; then
    peers+=("favor-debian|favor, PyTorch $(/usr/bin/python3 -c 'import torch; print(torch.__version__)') (Debian)|/usr/bin/python3|--impl favor")
  else
    echo "Debian PyTorch peer skipped: /usr/bin/python3 cannot import torch (apt-get install python3-torch;"
    echo "scripts/bench_train.sh --torch debian installs it)."
    echo
  fi
fi
for p in "${peers[@]}"; do
  IFS='|' read -r _ label python _ <<< "$p"
  echo "peer: $label ($python)"
done
[[ ${#peers[@]} -gt 0 ]] && echo

# Rounds alternate the sides (darkformer, PyTorch, darkformer, ...), so a background load
# that comes and goes reaches both; each configuration reports the median over rounds.
dark_files=""
for ((round = 1; round <= rounds; round++)); do
  [[ $rounds -gt 1 ]] && echo "==== round $round of $rounds ===="
  # ---- darkformer (memory is measured in the first round only) ----
  memory_args=()
  [[ $round -gt 1 ]] && memory_args=(--no-memory)
  if ! OMP_NUM_THREADS="$threads" "$bench" --threads "$threads" --kinds "$kinds" --features "$features" --exact-window "$exact_window" \
      "${lens_args[@]}" --reps "$reps" --budget-s "$budget_s" "${memory_args[@]}" --json "$out_dir/darkformer.$round.json" \
      2> >(tee "$out_dir/darkformer.$round.progress" >&2) | tee "$out_dir/darkformer.$round.log"; then
    echo "darkformer side failed (see $out_dir/darkformer.$round.progress)" >&2
    failed=1
  fi
  dark_files="${dark_files:+$dark_files,}$out_dir/darkformer.$round.json"
  # ---- the PyTorch peers ----
  for p in "${peers[@]}"; do
    IFS='|' read -r id label python flags <<< "$p"
    echo
    echo "PyTorch peer: $label; load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
    # shellcheck disable=SC2086  # $flags is a list of flags
    if ! "$python" bench/torch_attention.py $flags --threads "$threads" --omp-wait-policy "${wait_policy/env/default}" \
        --features "$features" "${lens_args[@]}" --reps "$reps" --budget-s "$budget_s" \
        --mem-budget-gib "$mem_budget_gib" > "$out_dir/peer.$id.$round.jsonl" 2> >(tee "$out_dir/peer.$id.$round.progress" >&2); then
      echo "PyTorch peer $label failed (see $out_dir/peer.$id.$round.progress)" >&2
      failed=1
    fi
    echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
  done
  echo
done
if [[ $rounds -gt 1 ]]; then
  echo "==== median over $rounds rounds ===="
  "$bench" --merge "$dark_files" --json "$out_dir/darkformer.json" | tee "$out_dir/darkformer.log"
else
  cp "$out_dir/darkformer.1.json" "$out_dir/darkformer.json" 2> /dev/null || true
fi

set +e
peer_list="$(for p in "${peers[@]}"; do IFS='|' read -r id label _ <<< "$p"; echo "$id|$label"; done)"
python3 - "$out_dir" "$strict" "$failed" "$json_out" "$peer_list" << 'EOF' | tee "$out_dir/comparison.txt"
import json, os, statistics, sys

out_dir, strict, failed, json_out = sys.argv[1], sys.argv[2] == "1", sys.argv[3] == "1", sys.argv[4]
peers = [line.split("|", 1) for line in sys.argv[5].splitlines() if line.strip()]  # [id, label]
label_of = dict(peers)
path = os.path.join(out_dir, "darkformer.json")
ours = json.load(open(path)) if os.path.exists(path) else {"rows": [], "summary": []}
verdicts = [s["verdict"] for s in ours.get("summary", []) if "verdict" in s]
combined = {"darkformer": ours, "peers": {pid: label for pid, label in peers}, "pytorch": [], "comparison": []}

# Each peer's rows per (m, L), the median over rounds (memory: the largest).
theirs = {}  # peer id -> {(m, L): row}
for pid, _ in peers:
    runs = {}
    for name in sorted(os.listdir(out_dir)):
        if name.startswith(f"peer.{pid}.") and name.endswith(".jsonl"):
            for line in open(os.path.join(out_dir, name)):
                if line.strip():
                    r = json.loads(line)
                    runs.setdefault((r["m"], r["L"]), []).append(r)
    rows = {}
    for key, rs in sorted(runs.items()):
        timed = [r for r in rs if "ms" in r]
        if not timed:
            rows[key] = dict(rs[0], peer=pid)
            continue
        merged = dict(timed[0], peer=pid)
        merged["ms"] = statistics.median(r["ms"] for r in timed)
        merged["ms_per_run"] = [r["ms"] for r in timed]
        merged["ms_min"] = min(r["ms_min"] for r in timed)
        merged["ms_max"] = max(r["ms_max"] for r in timed)
        merged["peak_rss_growth_mib"] = max(r["peak_rss_growth_mib"] for r in timed)
        rows[key] = merged
    theirs[pid] = rows
    combined["pytorch"].extend(rows.values())

# The peers are compared with the kinds without the exact window.
ours_by = {(r["kind"], r["m"], r["L"]): r for r in ours["rows"]
           if "ms" in r and "ref_of" not in r and not r.get("exact_window")}
if peers:
    print()
    print("darkformer vs the PyTorch peers, fwd+bwd median ms (peer/ours > 1: ours is faster); "
          "memory: peak RSS growth during the first call (MiB)")
    for pid, label in peers:
        print(f"  {pid}: {label}")
    header = ["m", "L", "peer", "peer ms", "performer ms", "darkformer ms", "peer/performer", "peer/darkformer",
              "peer RSS+", "performer RSS+", "darkformer RSS+"]
    table = []
    keys = sorted({k for rows in theirs.values() for k in rows})
    for m, L in keys:
        p, d = ours_by.get(("performer", m, L)), ours_by.get(("darkformer", m, L))
        for pid, _ in peers:
            t = theirs[pid].get((m, L))
            if t is None:
                continue
            ours_cells = [f'{p["ms"]:.1f}' if p else "-", f'{d["ms"]:.1f}' if d else "-"]
            if "ms" not in t:
                table.append([str(m), str(L), pid, t.get("skipped", "-")])
                continue
            rp = t["ms"] / p["ms"] if p else None
            rd = t["ms"] / d["ms"] if d else None
            combined["comparison"].append({"peer": pid, "m": m, "L": L, "peer_ms": t["ms"],
                                           "performer_ms": p["ms"] if p else None,
                                           "darkformer_ms": d["ms"] if d else None,
                                           "peer_over_performer": rp, "peer_over_darkformer": rd,
                                           "peer_rss_growth_mib": t["peak_rss_growth_mib"]})
            table.append([str(m), str(L), pid, f'{t["ms"]:.1f}'] + ours_cells +
                         [f"{rp:.2f}x" if rp else "-", f"{rd:.2f}x" if rd else "-", f'{t["peak_rss_growth_mib"]:.0f}',
                          f'{p["peak_rss_growth_mib"]:.0f}' if p and "peak_rss_growth_mib" in p else "-",
                          f'{d["peak_rss_growth_mib"]:.0f}' if d and "peak_rss_growth_mib" in d else "-"])
    width = [max([len(h)] + [len(r[i]) for r in table if len(r) == len(header)]) for i, h in enumerate(header)]
    fmt = lambda r: " | ".join(v.rjust(width[i]) for i, v in enumerate(r))
    print(fmt(header))
    print("-" * len(fmt(header)))
    for r in table:
        print(fmt(r) if len(r) == len(header) else fmt(r[:3]) + " | " + r[3])
    print()

    def ratios(pid, side, m, min_len=0):
        return [c[f"peer_over_{side}"] for c in combined["comparison"]
                if c["peer"] == pid and c["m"] == m and c["L"] >= min_len and c[f"peer_over_{side}"]]

    ms = sorted({m for m, _ in keys})
    # favor peers: ours >= 3x faster at every length measured on both sides.
    for pid, label in peers:
        if not pid.startswith("favor"):
            continue
        for side in ("performer", "darkformer"):
            for m in ms:
                vals = ratios(pid, side, m)
                if not vals:
                    continue
                worst, med = min(vals), statistics.median(vals)
                verdict = "PASS" if worst >= 3.0 else "FAIL"
                verdicts.append(verdict)
                print(f"{side + ' vs ' + pid:<38} m={m:<4} worst {worst:7.2f}x  median {med:7.2f}x  "
                      f"({len(vals)} L)  target >= 3x at every L          {verdict}")
    # darkformer-pytorch: ours >= 3x faster than its faster chunk setting at each L >= 2048.
    dp = [pid for pid, _ in peers if pid.startswith("dkfpt")]
    if dp:
        print("dkfpt (faster chunk): at each L, darkformer-pytorch's faster chunk setting (" + ", ".join(dp) + ")")
        for side in ("performer", "darkformer"):
            for m in ms:
                per_len = {}
                for c in combined["comparison"]:
                    if c["peer"] in dp and c["m"] == m and c[f"peer_over_{side}"]:
                        per_len[c["L"]] = min(per_len.get(c["L"], float("inf")), c[f"peer_over_{side}"])
                for pid in dp:
                    vals = ratios(pid, side, m)
                    if vals:
                        print(f"{side + ' vs ' + pid:<38} m={m:<4} worst {min(vals):7.2f}x  median "
                              f"{statistics.median(vals):7.2f}x  ({len(vals)} L)  (information)")
                vals = [v for L, v in per_len.items() if L >= 2048]
                if not vals:
                    verdicts.append("n/a")
                    print(f"{side + ' vs dkfpt (faster chunk)':<38} m={m:<4} no L >= 2048 measured: target n/a")
                    continue
                verdict = "PASS" if min(vals) >= 3.0 else "FAIL"
                verdicts.append(verdict)
                print(f"{side + ' vs dkfpt (faster chunk)':<38} m={m:<4} worst {min(vals):7.2f}x  median "
                      f"{statistics.median(vals):7.2f}x  ({len(vals)} L)  target >= 3x at every L >= 2048  {verdict}")
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
