#!/usr/bin/env bash
# The one prepared device check, for a machine with an NVIDIA GPU (sized for a 16-core H200:
# the whole check stays within --budget seconds, default 420):
#
#   scripts/gpu-check.sh --bundle ARCHIVE [--budget S] [OUT]   runs from an archive made by
#       scripts/gpu-bundle.sh on another machine: nothing is built here, so it works on a
#       machine with the driver and the CUDA toolkit but none of our Debian dependencies
#   scripts/gpu-check.sh [--budget S] [OUT]                    builds the CUDA targets here
#       first (build-gpu: Release, sm_${ARCH:-90a}), for a machine that has our dependencies
#   --cpu-stages (with --bundle): without a GPU, still run the stages that need none (mpi),
#       so a machine without a GPU tests the bundle's own Open MPI (CI does)
#   --bin DIR: the programs as already built in DIR (a build folder, or a flat folder of
#       programs), nothing built here (tests/gpu_check_flash_fallback.sh runs fake ones)
#   --stages A,B,...: run only these of the stages below (setup always): flash-sm90, tests,
#       quickstart, determinism, cuda-graph, mpi, bench (default: all)
#   Env: FLASH_SECONDS (60) the flash-sm90 stage's limit; QUICKSTART_STEPS (300); BUILD_DIR
#       (build-gpu) and ARCH (90a) in build mode; DARK_FLASH_SM90 is passed on as it is set
# Stages, each with its own time limit, in order of value (the budget left caps each):
#   setup        (bundle) unpack, check that every library of every program resolves (a
#                missing one is named with who needs it); record this machine's CPU (model,
#                cores, AVX-512 / AVX512_BF16 / AMX flags) and GPU. Without a GPU: say
#                "no GPU", write the summary and exit 0.
#   flash-sm90   the flash kernel tests alone (DARK_FLASH_SM90=on: the Hopper kernels themselves,
#                no self-check in their way), FLASH_SECONDS (60) at most: if they fail in any
#                way (wrong numbers, a crash, an illegal instruction, a hang: the Hopper
#                kernels wait on mbarriers), every later stage runs with DARK_FLASH_SM90=off
#                (the mma.sync kernels), stages.jsonl says which failure it was and the
#                summary's first line says so; the lines the library logs when its own sm_90
#                safety nets trigger (self-check, registers, mbarrier timeouts, fallbacks) are
#                kept (5 at most) in the stage's record and the summary
#   tests        every GPU test program (kernels against the CPU in float64, training runs
#                against the CPU, checkpoints across devices, NCCL with one rank)
#   quickstart   configs/quickstart.json for QUICKSTART_STEPS (300) steps on the CPU, then
#                on the GPU in f32 and in bf16: mean relative loss difference over the last
#                100 steps (f32 within 2%, bf16 within 5%)
#   determinism  the GPU runs once more, f32 and bf16: every logged loss and gradient norm
#                must equal the first run's bit for bit
#   cuda-graph   the bf16 quickstart once more with training.cuda_graph: the same bits as the
#                eager run, and both runs' tokens/s
#   mpi          two ranks under mpirun (the bundle's own Open MPI in bundle mode): the
#                collectives on exact data, and a 2-rank training run on the CPU against one
#                process, bit for bit
#   bench        scripts/bench_gpu.sh --quick: training tokens/s and MFU against PyTorch,
#                bf16 against f32, attention against SDPA and the random-feature kinds
#                against L; the summary ends with a markdown table of every target beside
#                its peer (MET, MISSED, or missing: budget / failed / not measured)
# Everything goes to $OUT, or the folder given as the last argument when $OUT is unset
# (default cache/gpu-check-<time>): a log per stage, summary.json and a compact summary
# (at most ~6,000 characters) printed at the end. Exit 1 when a stage failed, 0 otherwise.
set -uo pipefail
cd "$(dirname "$0")/.."
repo="$(pwd)"

bundle_archive=""
budget=420
cpu_stages=0
bin_dir=""
all_stages="flash-sm90,tests,quickstart,determinism,cuda-graph,mpi,bench"
stages="$all_stages"
out_arg=""
usage() { awk 'NR >= 3 && /^# Stages/ { exit } NR >= 3' "$0" | sed 's/^# \{0,1\}//'; }
while [[ $# -gt 0 ]]; do
  case "$1" in
    --bundle) bundle_archive="${2:?--bundle needs an archive}"; shift 2 ;;
    --budget) budget="${2:?--budget needs seconds}"; shift 2 ;;
    --cpu-stages) cpu_stages=1; shift ;;
    --bin) bin_dir="${2:?--bin needs a folder}"; shift 2 ;;
    --stages) stages="${2:?--stages needs a list}"; shift 2 ;;
    -h | --help) usage; exit 0 ;;
    -*) echo "gpu-check.sh: unknown flag '$1'" >&2; usage >&2; exit 2 ;;
    *) out_arg="$1"; shift ;;
  esac
done
for st in ${stages//,/ }; do
  [[ ",$all_stages," == *",$st,"* ]] ||
    { echo "gpu-check.sh: unknown stage '$st' (stages: $all_stages)" >&2; usage >&2; exit 2; }
done
want() { [[ ",$stages," == *",$1,"* ]]; }  # want STAGE: was it asked for (--stages)?
if [[ -n "$bin_dir" ]]; then
  [[ -z "$bundle_archive" ]] || { echo "gpu-check.sh: --bin and --bundle exclude each other" >&2; exit 2; }
  [[ -d "$bin_dir" ]] || { echo "gpu-check.sh: --bin: no such folder: $bin_dir" >&2; exit 2; }
  bin_dir="$(cd "$bin_dir" && pwd)"
fi
flash_seconds="${FLASH_SECONDS:-60}"
[[ "$flash_seconds" =~ ^[1-9][0-9]*$ ]] ||
  { echo "gpu-check.sh: FLASH_SECONDS must be a whole number of seconds, not '$flash_seconds'" >&2; exit 2; }
start=$(date +%s)
deadline=$((start + budget))
out="${OUT:-${out_arg:-cache/gpu-check-$(date +%Y%m%d-%H%M%S)}}"
mkdir -p "$out"
out="$(cd "$out" && pwd)"
log="$out/gpu-check.log"
: > "$log"
say() { echo "[gpu-check $(date +%H:%M:%S)] $*" | tee -a "$log" >&2; }
status_file="$out/stages.jsonl"
: > "$status_file"
# stage NAME STATUS [DETAIL] [SECONDS] [KEY=TEXT | KEY:=JSON | KEY[]=LINES ...]: one line of
# stages.jsonl; each extra field is a string, a JSON value, or the list of LINES' lines.
stage() {
  python3 -c '
import json, re, sys
name, status, detail, seconds, *extra = sys.argv[1:]
record = {"stage": name, "status": status, "detail": detail, "seconds": float(seconds)}
for field in extra:
    key, op, value = re.match(r"(\w+)(\[\]=|:=|=)(.*)", field, re.S).groups()
    record[key] = [l for l in value.splitlines() if l.strip()] if op == "[]=" else json.loads(value) if op == ":=" else value
print(json.dumps(record))' "$1" "$2" "${3:-}" "${4:-0}" "${@:5}" >> "$status_file"
}
# limit NOMINAL: seconds a stage may take now (its own limit, capped by the budget left).
# Never below 1: `timeout 0` would mean no limit at all.
limit() {
  local left=$((deadline - $(date +%s) - 5))
  (( left < 1 )) && left=1
  (( left < $1 )) && echo "$left" || echo "$1"
}
finish() {
  python3 "$repo/scripts/gpu_check_summary.py" "$out" | tee "$out/summary.txt"
  grep -q '"status": "failed"' "$status_file" && exit 1
  exit 0
}

# ---- setup: where the programs are ----
programs=(darkformer test_gpu_ops test_gpu_kernels test_gpu_training test_device_placement test_dist_nccl
          test_data_parallel_gpu dist_collectives darkformer_bench_train darkformer_bench_gpu_attention)
gpu_tests=(test_gpu_ops test_gpu_kernels test_gpu_training test_device_placement test_dist_nccl test_data_parallel_gpu)
if [[ -n "$bundle_archive" ]]; then
  [[ -f "$bundle_archive" ]] || { echo "gpu-check.sh: no such archive: $bundle_archive" >&2; exit 2; }
  unpack="$(mktemp -d "${TMPDIR:-/tmp}/darkformer-bundle-XXXXXX")"
  trap 'rm -rf "$unpack"' EXIT
  t0=$(date +%s)
  # tar needs xz for .tar.xz; Python's tarfile (lzma) unpacks it where xz is missing.
  if ! tar -C "$unpack" -xJf "$bundle_archive" 2> /dev/null &&
     ! python3 -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])' "$bundle_archive" "$unpack"; then
    say "cannot unpack $bundle_archive"
    stage setup failed "cannot unpack the archive"
    finish
  fi
  b="$unpack/darkformer-bundle"
  root="$b/src"
  bin="$b/bin"
  # Our programs find their libraries through RUNPATH ($ORIGIN/../lib) and this path; CUDA's
  # come from the toolkit. PyTorch must not see it (it brings its own CUDA libraries): every
  # python that imports torch runs through $b/python3-clean.
  export LD_LIBRARY_PATH="$b/lib:/usr/local/cuda/lib64:/usr/local/cuda/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  export OPAL_PREFIX="$b/mpi" PMIX_INSTALL_PREFIX="$b/mpi/pmix"
  export OPAL_SYSCONFDIR="$b/mpi/etc"
  printf '#!/bin/sh\nexec env -u LD_LIBRARY_PATH -u OPAL_PREFIX -u PMIX_INSTALL_PREFIX %s "$@"\n' "$(command -v python3)" \
    > "$b/python3-clean"
  chmod +x "$b/python3-clean"
  export PYTHON="$b/python3-clean"
  mpirun_exe="$b/mpi/bin/mpirun"
  # Every library of every ELF file resolves; with DARK_BUNDLE_STRICT=1 (CI) also only to the
  # bundle or to what gpu-bundle.sh left to the GPU machine (glibc, libstdc++, libgcc_s, zlib,
  # CUDA: MANIFEST.json's machine_provides).
  missing=""
  provided="$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["machine_provides"])' "$b/MANIFEST.json")"
  while IFS= read -r -d '' f; do
    [[ "$(head -c 4 "$f" | tail -c 3)" == "ELF" ]] || continue
    while read -r name arrow path _; do
      [[ "$arrow" == "=>" ]] || continue
      if [[ "$path" == "not" ]]; then
        missing+="${f#"$b"/} needs $name, which is missing"$'\n'
      elif [[ "${DARK_BUNDLE_STRICT:-0}" == 1 && "$path" != "$b"/* && ! "$name" =~ $provided ]]; then
        missing+="${f#"$b"/} loads $name from $path, outside the bundle (a bare GPU machine lacks it)"$'\n'
      fi
    done < <(ldd "$f" 2> /dev/null)
  done < <(find "$b/bin" "$b/lib" "$b/mpi" -type f \( -perm -u+x -o -name '*.so*' \) -print0)
  if [[ -n "$missing" ]]; then
    say "libraries that do not resolve:"
    printf '%s' "$missing" | sort -u | head -40 | tee -a "$log" >&2
    stage setup failed "$(printf '%s' "$missing" | sort -u | head -3 | tr '\n' ';')" $(($(date +%s) - t0))
    finish
  fi
  stage setup passed "unpacked $(basename "$bundle_archive"), every library resolves" $(($(date +%s) - t0))
  cp "$b/MANIFEST.json" "$out/manifest.json" 2> /dev/null
else
  root="$repo"
  bin=""
  build="${bin_dir:-${BUILD_DIR:-build-gpu}}"
  mpirun_exe="$(command -v mpirun || true)"
fi
cd "$root"
prog() {  # the path of program $1 (bundle: bin/; build: the build folder's subfolders)
  if [[ -n "$bin" ]]; then echo "$bin/$1"; return; fi
  local d
  for d in "" tests/ tests/mpi/ bench/; do [[ -x "$build/$d$1" ]] && { echo "$build/$d$1"; return; }; done
  echo "$build/$1"
}

# ---- two ranks under mpirun (a function: --cpu-stages runs it without a GPU) ----
# A tiny byte-level model on the repository's own text, so the stage needs neither the corpus
# nor a tokenizer's training.
stage_mpi() {
  local t0 mpi_env dp
  mpi_env=(-x OMPI_MCA_rmaps_base_oversubscribe=1 -x OMPI_MCA_mpi_yield_when_idle=1 --allow-run-as-root --oversubscribe --bind-to none)
  if [[ -z "$mpirun_exe" || ! -x "$mpirun_exe" ]]; then
    stage mpi skipped "no mpirun here (build mode without Open MPI)"
    return
  fi
  [[ -n "$bin" ]] && mpi_env+=(-x LD_LIBRARY_PATH -x OPAL_PREFIX -x PMIX_INSTALL_PREFIX -x OPAL_SYSCONFDIR)
  t0=$(date +%s)
  say "mpirun -np 2: collectives on exact data ($mpirun_exe)"
  if OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 timeout "$(limit 40)" "$mpirun_exe" -np 2 "${mpi_env[@]}" \
       "$(prog dist_collectives)" > "$out/mpi-collectives.log" 2>&1; then
    stage mpi:collectives passed "dist_collectives, 2 ranks" $(($(date +%s) - t0))
  else
    stage mpi:collectives failed "see mpi-collectives.log" $(($(date +%s) - t0))
    tail -n 8 "$out/mpi-collectives.log" >> "$log"
  fi
  t0=$(date +%s)
  say "mpirun -np 2: training on the CPU against one process"
  dp=(train --config configs/quickstart.json --set model.d_model=64 --set model.n_layers=2 --set model.n_heads=2
      --set data.tokenizer=byte --set "data.sources=[\"$root/README.md\",\"$root/docs/*.md\"]"
      --set data.dir="$out/mpi/data" --set data.seq_len=64 --set data.val_windows=8
      --set training.steps=12 --set schedule.warmup_steps=4 --set training.batch_size=8 --set training.eval_interval=12 --set training.eval_batches=1
      --set training.checkpoint_interval=0 --set training.generate_tokens=0 --set training.device=cpu)
  # One process with grad_accum 2 against 2 ranks of one micro-batch each, at the same number
  # of threads per process (a GEMM may sum in another order with another thread count).
  if OMP_NUM_THREADS=1 timeout "$(limit 60)" "$(prog darkformer)" "${dp[@]}" --set training.grad_accum=2 \
       --set output.dir="$out/mpi/one" > "$out/mpi-one.log" 2>&1 &&
     OMP_NUM_THREADS=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 timeout "$(limit 60)" "$mpirun_exe" -np 2 -x OMP_NUM_THREADS "${mpi_env[@]}" \
       "$(prog darkformer)" "${dp[@]}" --set output.dir="$out/mpi/two" > "$out/mpi-two.log" 2>&1 &&
     python3 "$repo/scripts/gpu_check_summary.py" --same-dirs "$out/mpi/one" "$out/mpi/two" 1e-12 > "$out/mpi.json"; then
    stage mpi:two-ranks passed "2 CPU ranks = 1 process, bit for bit" $(($(date +%s) - t0))
  else
    stage mpi:two-ranks failed "see mpi-one.log, mpi-two.log, mpi.json" $(($(date +%s) - t0))
    tail -n 8 "$out/mpi-one.log" "$out/mpi-two.log" >> "$log"
  fi
}

# This machine's CPU, with the flags that decide which CPU kernels could be tested here.
python3 - "$out" << 'EOF'
import json, os, sys
info = {"model": "?", "cores": os.cpu_count(), "flags": {}}
flags = set()
for line in open("/proc/cpuinfo"):
    if line.startswith("model name") and info["model"] == "?":
        info["model"] = line.split(":", 1)[1].strip()
    if line.startswith("flags") and not flags:
        flags = set(line.split(":", 1)[1].split())
for f in ("avx2", "fma", "avx512f", "avx512_bf16", "amx_bf16", "amx_tile"):
    info["flags"][f] = f in flags
json.dump(info, open(f"{sys.argv[1]}/cpu.json", "w"))
EOF

# ---- a GPU? ----
if ! command -v nvidia-smi > /dev/null 2>&1 || ! nvidia-smi -L > "$out/nvidia-smi.txt" 2>&1 ||
   ! grep -q "^GPU" "$out/nvidia-smi.txt"; then
  say "no GPU (nvidia-smi finds none): nothing to check"
  echo '{"gpu": false}' > "$out/gpu.json"
  stage gpu skipped "no GPU"
  [[ $cpu_stages == 1 && -n "$bin" ]] && want mpi && stage_mpi
  finish
fi
gpu_name="$(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | head -1)"
say "GPU: $gpu_name; CPU: $(python3 -c "import json; c = json.load(open('$out/cpu.json')); print(c['model'], c['cores'], 'cores')")"
python3 -c 'import json, sys; print(json.dumps({"gpu": True, "name": sys.argv[1]}))' "$gpu_name" > "$out/gpu.json"

# ---- build (without a bundle or --bin) ----
if [[ -n "$bin_dir" ]]; then
  say "--bin: the programs as built in $bin_dir (nothing built here)"
elif [[ -z "$bin" ]]; then
  [[ -x /usr/local/cuda/bin/nvcc ]] && export PATH="/usr/local/cuda/bin:$PATH"
  say "building in $build (sm_${ARCH:-90a}, $(nproc) jobs)"
  t0=$(date +%s)
  if timeout "$(limit 330)" cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DDARK_CUDA_ARCHITECTURES="${ARCH:-90a}" \
       -DDARK_BUILD_CUDA_EMULATOR=OFF -DDARK_BUILD_TESTS=ON -DDARK_BUILD_BENCH=ON > "$out/configure.log" 2>&1 &&
     timeout "$(limit 330)" cmake --build "$build" -j "$(nproc)" --target "${programs[@]}" > "$out/build.log" 2>&1; then
    stage build passed "" $(($(date +%s) - t0))
  else
    tail -n 20 "$out/configure.log" "$out/build.log" >> "$log"
    stage build failed "see build.log" $(($(date +%s) - t0))
    finish
  fi
fi

# ---- the Hopper flash kernels, first and briefly: their warp-specialised pipelines wait on
# mbarriers, and a wait that never ends would hang every later stage until its time limit.
# If the tests fail in any way (wrong numbers, a crash, an illegal instruction, a hang), the
# rest of the check runs on the mma.sync kernels (DARK_FLASH_SM90=off), stages.jsonl says which
# failure it was (failure, failure_detail, rc) and the summary's first line says so.
mkdir -p "$out/tests"
if want flash-sm90; then
  t0=$(date +%s)
  flash_limit=$(limit "$flash_seconds")
  say "flash-sm90: the flash kernel tests, $flash_limit s at most"
  # -k 5: a process that ignores the TERM (a kernel stuck on the device) is killed 5 s later.
  # DARK_FLASH_SM90=on (unless the caller set it): the tests see the Hopper kernels themselves,
  # not the mma.sync ones a failed self-check would put in their place (the register check
  # still guards against a hang).
  DARK_FLASH_SM90="${DARK_FLASH_SM90:-on}" timeout -k 5 "$flash_limit" "$(prog test_gpu_kernels)" \
    --gtest_filter='*flash*:*Flash*' > "$out/tests/flash-sm90.log" 2>&1
  rc=$?
  took=$(($(date +%s) - t0))
  # What the library logs when its own sm_90 safety nets trigger (the self-check against the
  # mma.sync kernels, the register split, the mbarrier wait limit, a fallback), 5 lines at most,
  # without spdlog's [time] [level] prefixes, each cut at 400 characters.
  nets="$(grep -aiE 'sm_?90' "$out/tests/flash-sm90.log" | grep -aiE 'falls? back|self-check|register|mbarrier' |
          sed -E 's/^(\[[^]]*\] *)+//' | awk '!seen[$0]++' | head -n 5 | cut -c 1-400)"
  caller=()
  [[ -n "${DARK_FLASH_SM90:-}" ]] && caller=("caller_env=DARK_FLASH_SM90=$DARK_FLASH_SM90")
  if [[ $rc == 0 ]]; then
    stage flash-sm90 passed "${nets:+the sm_90 safety nets of the library triggered: see safety_nets}" "$took" \
      "safety_nets[]=$nets" "${caller[@]}"
  else
    failed_tests="$(sed -nE 's/^\[  FAILED  \] ([^ ,]+\.[^ ,]+).*/\1/p' "$out/tests/flash-sm90.log" | awk '!seen[$0]++')"
    if [[ $rc == 124 ]] || [[ $rc == 137 && $took -ge $flash_limit ]]; then
      kind=timeout what="timeout after $flash_limit s"
    elif [[ $rc == 132 ]]; then
      kind=illegal-instruction what="illegal instruction, SIGILL"
    elif (( rc > 128 )); then
      kind=crash what="crash, SIG$(kill -l $((rc - 128)) 2> /dev/null || echo "NAL $((rc - 128))")"
    elif [[ $rc == 70 ]] && grep -aq '^darkformer: fatal CUDA error: .*ended with __trap()' "$out/tests/flash-sm90.log"; then
      # A bounded wait gave up: the kernel trapped, the context broke (a sticky error) and the
      # process ended with the hang report (core/cuda/cuda_check.h: exit 70).
      kind=hang what="hang, a bounded wait's report, the process ended by its sticky CUDA error"
    elif [[ $rc == 70 ]] && grep -aq '^darkformer: fatal CUDA error: ' "$out/tests/flash-sm90.log"; then
      kind=sticky-error what="sticky CUDA error, the process ended"
    elif [[ -n "$failed_tests" ]]; then
      kind=wrong-numbers what="wrong numbers, $(wc -l <<< "$failed_tests") failed: $(head -n 3 <<< "$failed_tests" | paste -sd ' ')"
    else
      kind=error what="exit $rc"
    fi
    export DARK_FLASH_SM90=off
    say "flash-sm90: the flash tests failed ($what, exit $rc): every later stage runs with DARK_FLASH_SM90=off"
    stage flash-sm90 failed "$what (exit $rc): every later stage ran with DARK_FLASH_SM90=off (the mma.sync kernels); see tests/flash-sm90.log" \
      "$took" "failure=$kind" "failure_detail=$what" "rc:=$rc" "fallback=DARK_FLASH_SM90=off" "safety_nets[]=$nets" \
      "failed_tests[]=$(head -n 10 <<< "$failed_tests")" "${caller[@]}"
    { grep -aE "^\[  FAILED|Failure" "$out/tests/flash-sm90.log" | head -n 10; tail -n 5 "$out/tests/flash-sm90.log"; } >> "$log"
  fi
fi

# ---- tests ----
if want tests; then
  for t in "${gpu_tests[@]}"; do
    t0=$(date +%s)
    say "test $t"
    if timeout "$(limit 150)" "$(prog "$t")" --gtest_output="json:$out/tests/$t.json" > "$out/tests/$t.log" 2>&1; then
      stage "test:$t" passed "" $(($(date +%s) - t0))
    else
      stage "test:$t" failed "see tests/$t.log" $(($(date +%s) - t0))
      grep -E "^\[  FAILED|Failure" "$out/tests/$t.log" | head -10 >> "$log"
    fi
  done
fi

# ---- quickstart on the CPU, the GPU in f32 and bf16 (and determinism: the GPU runs again) ----
if want quickstart; then
  steps="${QUICKSTART_STEPS:-300}"
  qs=(--config configs/quickstart.json --set training.steps="$steps" --set schedule.warmup_steps=$((steps < 250 ? steps / 5 : 50))
      --set training.log_interval=50
      --set training.eval_interval="$steps" --set training.checkpoint_interval=0 --set training.generate_tokens=16)
  if [[ -n "$bin" && -f "$b/corpus/python3.11-doc-sources.tar" && ! -d /usr/share/doc/python3.11/html/_sources ]]; then
    # The prepared data's inputs are checked against the corpus files (paths and sizes).
    if mkdir -p /usr/share/doc/python3.11/html 2> /dev/null &&
       tar -C /usr/share/doc/python3.11/html -xf "$b/corpus/python3.11-doc-sources.tar"; then
      say "unpacked the debdocs-python corpus to /usr/share/doc/python3.11/html/_sources"
    fi
  fi
  if [[ ! -d /usr/share/doc/python3.11/html/_sources ]]; then
    say "debdocs-python is not installed here: the quickstart trains on the repository's own text"
    qs+=(--set "data.sources=[\"$root/README.md\",\"$root/docs/results.md\",\"$root/core\",\"$root/autograd\",\"$root/nn\",\"$root/attention\",\"$root/data\",\"$root/train\"]"
         --set data.dir="$root/cache/data/gpu-check-repo-text")
  fi
  rm -rf "$out/quickstart"
  quickstart() {  # quickstart DEVICE PRECISION RUN_NAME STAGE_NAME LIMIT [--set K=V ...]
    local t0
    t0=$(date +%s)
    say "quickstart $steps steps on $1 in $2 ($3)"
    if timeout "$(limit "$5")" "$(prog darkformer)" train "${qs[@]}" --set training.device="$1" --set training.precision="$2" \
         --set output.dir="$out/quickstart/$3" "${@:6}" > "$out/quickstart-$3.log" 2>&1; then
      stage "$4" passed "" $(($(date +%s) - t0))
    else
      stage "$4" failed "see quickstart-$3.log" $(($(date +%s) - t0))
      tail -n 5 "$out/quickstart-$3.log" >> "$log"
      return 1
    fi
  }
  quick_ok=1
  quickstart cpu f32 cpu-f32 quickstart:cpu-f32 150 || quick_ok=0
  quickstart cuda f32 cuda-f32 quickstart:cuda-f32 60 || quick_ok=0
  quickstart cuda bf16 cuda-bf16 quickstart:cuda-bf16 60 || quick_ok=0
  if [[ $quick_ok == 1 ]]; then
    python3 "$repo/scripts/gpu_check_summary.py" --curves "$out" "$steps" > "$out/quickstart.json" &&
      stage quickstart-curves passed || stage quickstart-curves failed "see quickstart.json"
  fi
  if want determinism; then
    det_ok=1
    for p in f32 bf16; do
      if [[ -f "$out/quickstart/cuda-$p/metrics.jsonl" ]]; then
        quickstart cuda "$p" "cuda-$p-again" "determinism:run-$p" 60 || det_ok=0
      else
        det_ok=0
      fi
    done
    if [[ $det_ok == 1 ]]; then
      python3 "$repo/scripts/gpu_check_summary.py" --same "$out" cuda-f32 cuda-f32-again cuda-bf16 cuda-bf16-again \
        > "$out/determinism.json" && stage determinism passed "same bits run to run (f32, bf16)" ||
        stage determinism failed "see determinism.json"
    fi
  fi
  # training.cuda_graph: each step's passes as one graph launch; the eager run's bits expected.
  if want cuda-graph && [[ -f "$out/quickstart/cuda-bf16/metrics.jsonl" ]] &&
     quickstart cuda bf16 cuda-bf16-graph quickstart:cuda-bf16-graph 60 --set training.cuda_graph=true; then
    python3 "$repo/scripts/gpu_check_summary.py" --same "$out" cuda-bf16 cuda-bf16-graph > "$out/cuda_graph.json" &&
      stage cuda-graph passed "same bits as the eager bf16 run" || stage cuda-graph failed "see cuda_graph.json"
  fi
else
  for st in determinism cuda-graph; do
    want "$st" && stage "$st" skipped "needs the quickstart stage's runs (--stages)"
  done
fi

want mpi && stage_mpi

# ---- benchmarks against PyTorch ----
# The summary's targets table tells a row the bench never reached for lack of time ("missing:
# budget": this stage skipped, or cut by its limit: reason timeout) from one a failure lost.
left=$(limit 600)
if ! want bench; then
  :
elif (( left < 60 )); then
  stage bench skipped "out of time ($left s left of the budget)" 0 "reason=budget"
else
  t0=$(date +%s)
  say "benchmarks (scripts/bench_gpu.sh --quick, $left s at most)"
  BENCH_BIN_DIR="$(dirname "$(prog darkformer_bench_train)")" timeout -k 5 "$left" "$root/scripts/bench_gpu.sh" --quick \
    --out "$out/bench" > "$out/bench.log" 2>&1
  rc=$?
  if [[ $rc == 0 ]]; then
    stage bench passed "" $(($(date +%s) - t0))
  elif [[ $rc == 124 || $rc == 137 ]]; then
    stage bench failed "cut by its time limit ($left s): the rows it had not reached are missing" \
      $(($(date +%s) - t0)) "reason=timeout" "rc:=$rc"
  else
    stage bench failed "see bench.log (partial rows are in the summary)" $(($(date +%s) - t0)) "reason=failed" "rc:=$rc"
  fi
fi
finish
