#!/usr/bin/env bash
# The one prepared device check, for a machine with an NVIDIA GPU (sized for a 16-core H200
# with the CUDA toolkit and PyTorch, no internet, under 8 minutes):
#   1. configure and build the CUDA targets it needs (Release, sm_90 unless ARCH says
#      otherwise, all cores);
#   2. run every GPU test (test_gpu_ops, test_gpu_kernels, test_gpu_training,
#      test_device_placement, test_dist_nccl, test_data_parallel_gpu): CUDA kernels against
#      the CPU in float64, training on the GPU against the CPU, checkpoints across devices;
#   3. train configs/quickstart.json for QUICKSTART_STEPS (300) steps on the CPU, then on the
#      GPU in f32 and in bf16, and compare the loss curves (f32 within 2%, bf16 within 5%, mean
#      relative difference over the last 100 steps); the corpus is debdocs-python when
#      /usr/share/doc/python3.11 is there, else the repository's own text;
#   4. scripts/bench_gpu.sh --quick: training tokens/s and MFU against PyTorch, attention
#      against SDPA and the random-feature kinds against L.
# Every log and summary.json go to $OUT, or to the folder given as the only argument when
# $OUT is unset (default cache/gpu-check-<time>). Without a GPU it says "no GPU" and exits
# 0. Exit 1 when a stage failed (the summary says which), 0 otherwise.
set -uo pipefail
cd "$(dirname "$0")/.."
root="$(pwd)"
out="${OUT:-${1:-cache/gpu-check-$(date +%Y%m%d-%H%M%S)}}"
mkdir -p "$out"
out="$(cd "$out" && pwd)"
log="$out/gpu-check.log"
say() { echo "[gpu-check $(date +%H:%M:%S)] $*" | tee -a "$log"; }
status_file="$out/stages.jsonl"
: > "$status_file"
stage() {  # stage NAME STATUS [DETAIL]
  printf '{"stage": "%s", "status": "%s", "detail": "%s"}\n' "$1" "$2" "${3:-}" >> "$status_file"
}
finish() {
  python3 - "$out" << 'EOF'
import glob, json, os, sys
out = sys.argv[1]
summary = {"stages": [json.loads(l) for l in open(f"{out}/stages.jsonl") if l.strip()]}
for name in ("gpu.json", "tests.json", "quickstart.json"):
    path = f"{out}/{name}"
    if os.path.exists(path):
        summary[name[:-5]] = json.load(open(path))
bench = f"{out}/bench/summary.json"
if os.path.exists(bench):
    summary["bench"] = json.load(open(bench))
    summary["bench"].get("attention", {}).pop("rows", None)
json.dump(summary, open(f"{out}/summary.json", "w"), indent=1)
failed = [s["stage"] for s in summary["stages"] if s["status"] == "failed"]
print(json.dumps({k: v for k, v in summary.items() if k != "bench"}, indent=1))
print("failed stages:", ", ".join(failed) if failed else "none")
EOF
  grep -q '"status": "failed"' "$status_file" && exit 1
  exit 0
}

# ---- 0. a GPU? ----
if ! command -v nvidia-smi > /dev/null 2>&1 || ! nvidia-smi -L > "$out/nvidia-smi.txt" 2>&1 ||
   ! grep -q "^GPU" "$out/nvidia-smi.txt"; then
  say "no GPU (nvidia-smi finds none): nothing to check"
  echo '{"gpu": false}' > "$out/gpu.json"
  stage gpu skipped "no GPU"
  finish
fi
gpu_name="$(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | head -1)"
say "GPU: $gpu_name; CPU: $(lscpu | sed -n 's/^Model name: *//p' | head -1), $(nproc) cores"
printf '{"gpu": true, "name": "%s", "cpu": "%s", "cores": %s}\n' "$gpu_name" \
  "$(lscpu | sed -n 's/^Model name: *//p' | head -1)" "$(nproc)" > "$out/gpu.json"

# ---- 1. build ----
[[ -x /usr/local/cuda/bin/nvcc ]] && export PATH="/usr/local/cuda/bin:$PATH"
build="${BUILD_DIR:-build-gpu}"
tests=(test_gpu_ops test_gpu_kernels test_gpu_training test_device_placement test_dist_nccl test_data_parallel_gpu)
say "building in $build (sm_${ARCH:-90}, $(nproc) jobs)"
if timeout 330 cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DDARK_CUDA_ARCHITECTURES="${ARCH:-90}" \
     -DDARK_BUILD_CUDA_EMULATOR=OFF -DDARK_BUILD_TESTS=ON -DDARK_BUILD_BENCH=ON > "$out/configure.log" 2>&1 &&
   timeout 330 cmake --build "$build" -j "$(nproc)" --target darkformer "${tests[@]}" darkformer_bench_train \
     darkformer_bench_gpu_attention > "$out/build.log" 2>&1; then
  stage build passed
else
  say "build failed: see configure.log / build.log (tail below)"
  tail -20 "$out/configure.log" "$out/build.log" | tee -a "$log"
  stage build failed "see build.log"
  finish
fi

# ---- 2. GPU tests ----
mkdir -p "$out/tests"
for t in "${tests[@]}"; do
  say "test $t"
  if timeout 300 "$build/tests/$t" --gtest_output="json:$out/tests/$t.json" > "$out/tests/$t.log" 2>&1; then
    stage "test:$t" passed
  else
    stage "test:$t" failed "see tests/$t.log"
    grep -E "^\[  FAILED|Failure" "$out/tests/$t.log" | head -20 | tee -a "$log"
  fi
done
python3 - "$out" << 'EOF' > "$out/tests.json"
import glob, json, os, sys
out = sys.argv[1]
result = {}
for path in sorted(glob.glob(f"{out}/tests/*.json")):
    j = json.load(open(path))
    failed = [f"{s['name']}.{c['name']}" for s in j.get("testsuites", []) for c in s.get("testsuite", [])
              if c.get("failures")]
    skipped = sum(1 for s in j.get("testsuites", []) for c in s.get("testsuite", []) if c.get("result") == "SKIPPED")
    result[os.path.basename(path)[:-5]] = {"tests": j.get("tests"), "failures": j.get("failures"),
                                           "skipped": skipped, "failed": failed[:20]}
print(json.dumps(result, indent=1))
EOF

# ---- 3. quickstart on the CPU, the GPU in f32 and bf16 ----
steps="${QUICKSTART_STEPS:-300}"
qs=(--config configs/quickstart.json --set training.steps="$steps" --set training.log_interval=50
    --set training.eval_interval="$steps" --set training.checkpoint_interval=0 --set training.generate_tokens=16)
if [[ ! -d /usr/share/doc/python3.11/html/_sources ]]; then
  say "debdocs-python is not installed here: the quickstart trains on the repository's own text"
  qs+=(--set "data.sources=[\"$root/README.md\",\"$root/docs/results.md\",\"$root/core\",\"$root/autograd\",\"$root/nn\",\"$root/attention\",\"$root/data\",\"$root/train\"]"
       --set data.dir="$root/cache/data/gpu-check-repo-text")
fi
rm -rf "$out/quickstart"
quick_ok=1
for run in "cpu f32" "cuda f32" "cuda bf16"; do
  set -- $run
  say "quickstart $steps steps on $1 in $2"
  if ! timeout 240 "$build/darkformer" train "${qs[@]}" --set training.device="$1" --set training.precision="$2" \
       --set output.dir="$out/quickstart/$1-$2" > "$out/quickstart-$1-$2.log" 2>&1; then
    stage "quickstart:$1-$2" failed "see quickstart-$1-$2.log"
    tail -5 "$out/quickstart-$1-$2.log" | tee -a "$log"
    quick_ok=0
  else
    stage "quickstart:$1-$2" passed
  fi
done
if [[ $quick_ok == 1 ]]; then
  python3 - "$out" "$steps" << 'EOF' > "$out/quickstart.json" || stage quickstart-curves failed "see quickstart.json"
import json, sys
out, steps = sys.argv[1], int(sys.argv[2])
def curve(name):
    c, t = {}, {}
    for line in open(f"{out}/quickstart/{name}/metrics.jsonl"):
        j = json.loads(line)
        if "loss" in j:
            c[j["step"]] = j["loss"]
            t[j["step"]] = j.get("tokens_per_s", 0)
        if "eval_loss" in j:
            c["eval"] = j["eval_loss"]
    return c, t
cpu, cpu_t = curve("cpu-f32")
result = {"steps": steps, "cpu_final_loss": cpu[steps], "cpu_tokens_per_s": cpu_t[steps]}
ok = True
for name, tol in (("cuda-f32", 0.02), ("cuda-bf16", 0.05)):
    c, t = curve(name)
    window = [s for s in range(max(1, steps - 99), steps + 1)]
    diff = sum(abs(c[s] - cpu[s]) / cpu[s] for s in window) / len(window)
    result[name] = {"final_loss": c[steps], "eval_loss": c.get("eval"), "tokens_per_s": t[steps],
                    "mean_rel_diff_last_100": diff, "tolerance": tol, "pass": diff <= tol}
    ok = ok and diff <= tol
result["pass"] = ok
print(json.dumps(result, indent=1))
sys.exit(0 if ok else 1)
EOF
  grep -q '"pass": true' "$out/quickstart.json" && stage quickstart-curves passed
  tail -25 "$out/quickstart.json" | tee -a "$log"
fi

# ---- 4. benchmarks against PyTorch ----
say "benchmarks (scripts/bench_gpu.sh --quick)"
if BUILD_DIR="$build" timeout 300 scripts/bench_gpu.sh --quick --out "$out/bench" > "$out/bench.log" 2>&1; then
  stage bench passed
else
  stage bench failed "see bench.log"
fi
tail -40 "$out/bench.log" | tee -a "$log"
finish
