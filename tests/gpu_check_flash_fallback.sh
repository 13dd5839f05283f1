#!/usr/bin/env bash
# scripts/gpu-check.sh's flash-sm90 stage end to end, without a GPU: a fake nvidia-smi on PATH
# ("GPU 0: Fake H100") and a folder of fake test programs (shell scripts named like the real
# ones) run through the real script (--bin FOLDER --stages flash-sm90,tests, FLASH_SECONDS=2).
# The fake test_gpu_kernels, called with the flash tests' filter, fails in the way a mode asks:
#   wrong   gtest's "[  FAILED  ]" lines, exit 1 (wrong numbers)
#   segv    kill -SEGV itself (a crash), after printing an mbarrier hang report
#   abrt    kill -ABRT itself (a crash)
#   ill     kill -ILL itself (an illegal instruction)
#   trap    what a hung Hopper kernel makes the library print (its bounded wait's report and the
#           sticky error's end, core/cuda/cuda_check.h), exit 70
#   sticky  the same end after an illegal address (no hang report), exit 70
#   hang    sleeps past FLASH_SECONDS (timeout's TERM ends it: exit 124)
#   stuck   ignores TERM and sleeps (timeout's KILL 5 s later: exit 137, still a timeout)
#   pass    passes; net: passes, printing a line of the library's sm_90 self-check
# Every fake program writes the DARK_FLASH_SM90 it saw into a file (and a minimal gtest JSON
# when given --gtest_output). For each failing mode: gpu-check.sh exits 1, every program of the
# later tests stage saw DARK_FLASH_SM90=off, stages.jsonl marks flash-sm90 failed with the
# right kind, and the summary's first line announces the fallback. For pass and net: exit 0,
# DARK_FLASH_SM90 unset in every later stage, no fallback line (net: the self-check's line is
# in stages.jsonl's safety_nets and the summary's first lines).
# Usage: gpu_check_flash_fallback.sh [REPO_ROOT]   (needs no build; about 25 s)
set -euo pipefail
repo="$(cd "${1:-$(dirname "$0")/..}" && pwd)"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
ulimit -c 0  # the crashing fakes leave no core files

# ---- the fake GPU and programs ----
mkdir -p "$work/path" "$work/bin"
cat > "$work/path/nvidia-smi" << 'EOF'
#!/bin/sh
case " $* " in
  *" -L "*) echo "GPU 0: Fake H100 (UUID: GPU-0)" ;;
  *--query-gpu*) echo "Fake H100, 81559 MiB, 580.00" ;;
  *) echo "fake nvidia-smi: $*" >&2; exit 1 ;;
esac
EOF
cat > "$work/bin/fake-test" << 'EOF'
#!/usr/bin/env bash
# A fake GPU test program: what DARK_FLASH_SM90 it saw, a gtest JSON, and the flash modes.
name="$(basename "$0")"
filter="" json=""
for a in "$@"; do
  case "$a" in
    --gtest_filter=*) filter="${a#--gtest_filter=}" ;;
    --gtest_output=json:*) json="${a#--gtest_output=json:}" ;;
  esac
done
if [[ "$name" == test_gpu_kernels && "$filter" == *lash* ]]; then
  echo "[==========] Running 2 tests from 1 test suite."
  echo "[ RUN      ] GpuFlash.ForwardMatchesCpu"
  case "$FAKE_FLASH_MODE" in
    wrong)
      echo "tests/test_gpu_kernels.cpp:123: Failure: max |diff| 0.5 beyond 0.02"
      echo "[  FAILED  ] GpuFlash.ForwardMatchesCpu (12 ms)"
      echo "[ RUN      ] GpuFlash.BackwardMatchesCpu"
      echo "[  FAILED  ] GpuFlash.BackwardMatchesCpu, where GetParam() = 64 (9 ms)"
      echo "[  FAILED  ] 2 tests, listed below:"
      echo "[  FAILED  ] GpuFlash.ForwardMatchesCpu"
      echo "[  FAILED  ] GpuFlash.BackwardMatchesCpu, where GetParam() = 64"
      exit 1 ;;
    segv)
      echo "[2026-12-06 10:00:00.000] [error] flash_attention: forward_sm90_kernel<64>, warp-specialised: block (3, 0, 1) warp 0 (loading) waited over 4 s for the computing warps to free stage 1 (mbarrier free, phase parity 0): the kernel ended with __trap()"
      kill -SEGV $$ ;;
    abrt) kill -ABRT $$ ;;
    ill) kill -ILL $$ ;;
    trap)
      echo "darkformer: fatal CUDA error: core/cuda/flash_attention.cu:612: CUDA call cudaStreamSynchronize(stream) failed: cudaErrorLaunchFailure (unspecified launch failure); forward_sm90_kernel<128>, K, V tiles: block (0, 0, 0) warp 8 (loading) waited over 4 s for every computing warp to finish (mbarrier done, phase parity 0): a computing warp waits forever (a lost arrival, or registers that never came) or a release is missing; the kernel ended with __trap()" >&2
      echo "darkformer: the error is sticky: this process's CUDA context is broken and every later CUDA call would fail, so the process ends here (exit 70). Run it again; a Hopper (sm_90) flash kernel hung: DARK_FLASH_SM90=off runs the mma.sync kernels instead" >&2
      exit 70 ;;
    sticky)
      echo "darkformer: fatal CUDA error: core/cuda/copy.cu:45: CUDA call cudaGetLastError() failed: cudaErrorIllegalAddress (an illegal memory access was encountered)" >&2
      exit 70 ;;
    hang) exec sleep $((FLASH_SECONDS + 60)) ;;
    stuck) trap '' TERM; sleep $((FLASH_SECONDS + 60)); exit 0 ;;
    net)
      echo "[2026-12-06 10:00:00.000] [error] flash_attention: self-check failed: the sm_90 kernels forward_sm90_kernel<64> (forward, d 64, causal) differ from the mma.sync kernels on a small problem: out max |diff| 0.5: this process falls back to the mma.sync kernels for forward, d 64, causal"
      echo "[2026-12-06 10:00:00.001] [error] flash_attention: self-check failed: the sm_90 kernels forward_sm90_kernel<64> (forward, d 64, causal) differ from the mma.sync kernels on a small problem: out max |diff| 0.5: this process falls back to the mma.sync kernels for forward, d 64, causal"
      echo "flash_attention: a line without the kernel family's name falls back to nothing" ;;
  esac
  echo "[       OK ] GpuFlash.ForwardMatchesCpu (3 ms)"
  echo "[  PASSED  ] 2 tests."
  exit 0
fi
echo "${DARK_FLASH_SM90-unset}" > "$FAKE_SEEN/$name"
[[ -n "$json" ]] && printf '{"tests": 1, "failures": 0, "testsuites": [{"name": "Fake", "testsuite": [{"name": "Runs"}]}]}\n' > "$json"
echo "[  PASSED  ] 1 test."
EOF
chmod +x "$work/path/nvidia-smi" "$work/bin/fake-test"
programs=(test_gpu_ops test_gpu_kernels test_gpu_training test_device_placement test_dist_nccl test_data_parallel_gpu)
for p in "${programs[@]}"; do ln -s fake-test "$work/bin/$p"; done

# ---- each mode through the real script ----
# mode  exit  failure kind  failure_detail  (pass and net: no failure)
cases="wrong 1 wrong-numbers wrong_numbers,_2_failed
segv 1 crash crash,_SIGSEGV
abrt 1 crash crash,_SIGABRT
ill 1 illegal-instruction illegal_instruction,_SIGILL
trap 1 hang hang,_a_bounded_wait's_report
sticky 1 sticky-error sticky_CUDA_error
hang 1 timeout timeout_after_2_s
stuck 1 timeout timeout_after_2_s
pass 0 - -
net 0 - -"
while read -r mode want_rc kind detail; do
  detail="${detail//_/ }"
  dir="$work/$mode"
  mkdir -p "$dir/seen"
  t0=$(date +%s)
  env -u DARK_FLASH_SM90 PATH="$work/path:$PATH" FLASH_SECONDS=2 FAKE_FLASH_MODE="$mode" FAKE_SEEN="$dir/seen" \
    OUT="$dir/out" bash "$repo/scripts/gpu-check.sh" --bin "$work/bin" --stages flash-sm90,tests \
    < /dev/null > "$dir/log" 2>&1 && rc=0 || rc=$?
  [[ $rc == "$want_rc" ]] || { cat "$dir/log"; fail "$mode: gpu-check.sh exited $rc, want $want_rc"; }
  python3 - "$dir" "$mode" "$kind" "$detail" "${programs[@]}" << 'EOF' || { cat "$dir/log"; fail "$mode: see above"; }
import json, sys
d, mode, kind, detail, *programs = sys.argv[1:]
stages = [json.loads(l) for l in open(f"{d}/out/stages.jsonl")]
flash = [s for s in stages if s["stage"] == "flash-sm90"]
assert len(flash) == 1, f"{mode}: flash-sm90 records: {flash}"
flash = flash[0]
seen = {p: open(f"{d}/seen/{p}").read().strip() for p in programs}
lines = open(f"{d}/out/summary.txt").read().splitlines()
for p in programs:
    assert any(s["stage"] == f"test:{p}" and s["status"] == "passed" for s in stages), f"{mode}: test:{p} did not pass"
if kind != "-":
    assert seen == {p: "off" for p in programs}, f"{mode}: the later stage saw DARK_FLASH_SM90 {seen}, want off everywhere"
    assert flash["status"] == "failed", f"{mode}: flash-sm90 {flash}"
    assert flash.get("failure") == kind, f"{mode}: failure {flash.get('failure')!r}, want {kind!r}: {flash}"
    assert flash.get("failure_detail", "").startswith(detail), f"{mode}: failure_detail {flash.get('failure_detail')!r}"
    assert flash.get("fallback") == "DARK_FLASH_SM90=off", flash
    want = f"FLASH FALLBACK: the Hopper (sm_90) flash tests failed ({flash['failure_detail']}): every later stage ran on " \
           "the mma.sync kernels (DARK_FLASH_SM90=off)"
    assert lines[0] == want, f"{mode}: the summary's first line is {lines[0]!r}, want {want!r}"
    if mode == "wrong":
        assert flash["failed_tests"] == ["GpuFlash.ForwardMatchesCpu", "GpuFlash.BackwardMatchesCpu"], flash
    if mode == "trap":  # the library's own hang report line is kept as a safety net's
        assert len(flash["safety_nets"]) == 1 and "forward_sm90_kernel<128>, K, V tiles" in flash["safety_nets"][0], flash
        assert flash["rc"] == 70, flash
    if mode == "segv":  # the hang report names the kernel (forward_sm90_kernel) and the mbarrier
        assert len(flash["safety_nets"]) == 1 and "mbarrier free" in flash["safety_nets"][0], flash
        assert flash["safety_nets"][0].startswith("flash_attention: forward_sm90_kernel<64>"), flash
        assert lines[1].startswith("  sm_90 log: flash_attention: forward_sm90_kernel<64>"), lines[:3]
else:
    assert seen == {p: "unset" for p in programs}, f"{mode}: the later stage saw DARK_FLASH_SM90 {seen}, want unset"
    assert flash["status"] == "passed", f"{mode}: flash-sm90 {flash}"
    assert not any("FLASH FALLBACK" in l for l in lines), f"{mode}: a fallback line in {lines}"
    if mode == "net":  # two identical lines (but for spdlog's time) kept once, the unrelated one left out
        assert len(flash["safety_nets"]) == 1 and flash["safety_nets"][0].startswith(
            "flash_attention: self-check failed: the sm_90 kernels"), flash
        assert lines[0].startswith("FLASH SAFETY NETS") and "self-check failed" in lines[1], lines[:3]
    else:
        assert flash["safety_nets"] == [] and "FLASH" not in lines[0], (flash, lines[:2])
print(f"{mode}: {flash['status']}" + (f" ({flash['failure']}: {flash['failure_detail']}), later stages saw "
      f"DARK_FLASH_SM90={seen[programs[0]]}" if kind != "-" else ", later stages saw DARK_FLASH_SM90 unset") +
      f"; summary line 1: {lines[0][:90]}")
EOF
done <<< "$cases"
echo "gpu-check.sh: every failure of the flash stage switches the later stages to DARK_FLASH_SM90=off, and says so"
