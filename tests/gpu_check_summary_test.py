#!/usr/bin/env python3
"""scripts/gpu_check_summary.py's targets table on synthetic device-check folders (standard
library only; CTest scripts.gpu_check_summary).

Each case writes an OUT folder as scripts/gpu-check.sh and scripts/bench_gpu.sh would leave it
(stages.jsonl, gpu.json, tests/*.json, bench/plan.json, train.jsonl, attention.jsonl,
payoff.jsonl, failures.txt), runs the summary as gpu-check.sh does (a separate process), and
reads its stdout and summary.json's targets_table:
  - every bench row present (--quick's plan, as the check runs it): each of the 35 targets MET
    or MISSED as the numbers say, the whole summary under 6,000 characters, also with a failed
    flash stage's first lines and with the full plan's lengths;
  - a plan without L 8192: its flash rows "missing: not measured by this run (--quick)";
  - the bench stage skipped for the budget (no bench folder), or cut by its time limit:
    "missing: budget"; the bench stage failed: "missing: failed"; one failed part
    (failures.txt) takes only its own rows;
  - a failed flash-sm90 stage: the summary's first line says the check fell back;
  - a safety net's line in a later stage's log (a self-check that failed): in the first lines;
  - a summary too long even without its per-L lines: cut before the table, whose every row
    stays, as does the first line.
Usage: gpu_check_summary_test.py [REPO_ROOT] (default: this file's repository).
"""
import json
import os
import subprocess
import sys
import tempfile
import unittest

REPO = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 and not sys.argv[1].startswith("-") else
                       os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
SUMMARY = os.path.join(REPO, "scripts", "gpu_check_summary.py")
QUICK_LENS = [1024, 2048, 4096, 8192, 16384, 65536, 131072]  # bench_gpu.sh --quick: what the check runs
FULL_LENS = [1024, 2048, 4096, 8192, 16384, 32768, 65536, 131072]  # bench_gpu.sh without --quick
NO_8192 = [1024, 2048, 4096, 16384, 65536, 131072]  # a plan without L 8192
GPU_TESTS = {"test_gpu_ops": 132, "test_gpu_kernels": 88, "test_gpu_training": 7, "test_device_placement": 6,
             "test_dist_nccl": 9, "test_data_parallel_gpu": 2}
BENCH_STAGES = ["flash-sm90", "bench"]
MODEL = {"d_model": 768, "n_layers": 12, "n_heads": 12, "n_kv_heads": 12, "seq_len": 1024, "vocab_size": 50304}
PARAMETERS = 124475904
# What each full-case row should say (the synthetic numbers below are made to give these).
FULL_EXPECTED = {
    "GPT-2-small step tok/s": "MISSED",  # 410k against 450k tok/s
    "GPT-2-small MFU": "MISSED",  # 33%
    "GPT-2-small peak memory": "MET",  # 21000 against 24000 MiB
    "bf16 step tok/s vs f32": "MET",  # 4.3x
    "darkformer/softmax model tok/s, seq 8192": "MET",  # 2.5x
    "darkformer/softmax model tok/s, seq 32768": "MISSED",  # 4.0x
    "darkformer/performer m64": "MET",  # 1.05x
    "darkformer/performer m256": "MISSED",  # 1.20x
}


def write_jsonl(path, rows):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")


def write_json(path, value):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        json.dump(value, f)


def flash_ratio(d, length):
    """Our flash TFLOP/s over SDPA's: d 64 misses at L 1024 (0.65 < 0.7), d 256 from L 4096."""
    if d == 64 and length == 1024:
        return 0.65
    if d == 256 and length >= 4096:
        return 0.8
    return 0.95


def rf_ms(kind, m, length):
    """Random-feature ms per 131072 tokens: darkformer 1.05x performer at m 64, 1.2x at m 256."""
    base = (2.0 if m == 64 else 6.0) * (1.0 + 0.1 * (length >= 65536))
    return base * {"performer": 1.0, "lfk": 1.02, "darkformer": 1.05 if m == 64 else 1.2}[kind]


def sdpa_ms(length):
    return 0.5 * length / 1024  # grows as L at 131072 tokens per call: 2 ms at L 4096


def bench_rows(lens):
    attn = []
    for d in (64, 128, 256):
        for length in lens:
            sdpa_tf = 400.0 if d < 256 else 300.0
            t = sdpa_ms(length)
            attn.append({"side": "torch", "kind": "sdpa", "d": d, "len": length, "ms": t, "tflops": sdpa_tf})
            attn.append({"kind": "softmax", "m": 0, "d": d, "len": length, "ms": t / flash_ratio(d, length),
                         "tflops": sdpa_tf * flash_ratio(d, length), "peak_mib": 100.0})
            for m in (64, 256):
                for kind in ("performer", "lfk", "darkformer"):
                    attn.append({"kind": kind, "m": m, "d": d, "len": length, "ms": rf_ms(kind, m, length),
                                 "peak_mib": 50.0})
    profile = {"steps": 3, "median_step_ms": 40.0, "kernels_ms_per_step": 37.5,
               "rows": [{"phase": "backward", "kernel": f"kernel_number_{i}", "ms_per_step": 4.0 - 0.3 * i,
                         "tflop_per_step": 1.0} for i in range(12)]}
    phases = {"forward": 12.1, "backward": 24.3, "grad_norm_clip": 0.8, "optimizer": 2.1}
    train = [
        {"side": "darkformer", "precision": "bf16", "cuda_graph": False, "tokens_per_s": 410000.0,
         "median_step_ms": 40.0, "alloc_peak_mb": 21000.0, "parameters": PARAMETERS, "model": MODEL,
         "phases_ms": phases, "profile": profile},
        {"side": "darkformer", "precision": "bf16", "cuda_graph": True, "tokens_per_s": 430000.0,
         "median_step_ms": 38.1, "alloc_peak_mb": 21500.0, "parameters": PARAMETERS, "model": MODEL,
         "phases_ms": phases},
        {"side": "torch", "mode": "eager", "precision": "bf16", "tokens_per_s": 300000.0, "peak_mem_mib": 26000.0},
        {"side": "torch", "mode": "compile", "precision": "bf16", "tokens_per_s": 450000.0, "peak_mem_mib": 24000.0},
        {"side": "darkformer", "precision": "f32", "cuda_graph": False, "tokens_per_s": 95000.0,
         "median_step_ms": 172.0, "alloc_peak_mb": 38000.0, "parameters": PARAMETERS, "model": MODEL,
         "phases_ms": phases},
    ]
    payoff = []
    for length in (1024, 8192, 32768):
        soft = 400000.0 / (1 + length / 4096)
        ratio = {1024: 0.9, 8192: 2.5, 32768: 4.0}[length]
        payoff += [{"payoff_kind": "softmax", "payoff_len": length, "tokens_per_s": soft},
                   {"payoff_kind": "darkformer", "payoff_len": length, "tokens_per_s": soft * ratio}]
    return train, attn, payoff


def make_out(root, lens=QUICK_LENS, bench="passed", bench_reason=None, bench_files=True, failures=(), flash=None,
             cut=None):
    """A device-check folder. bench: the bench stage's status (None: no bench stage); cut: drop
    these bench files (a time limit that stopped the bench before them)."""
    out = tempfile.mkdtemp(dir=root)
    stages = [{"stage": "setup", "status": "passed", "detail": "unpacked, every library resolves", "seconds": 3.0}]
    stages.append(flash or {"stage": "flash-sm90", "status": "passed", "detail": "", "seconds": 9.0, "safety_nets": []})
    for name, count in GPU_TESTS.items():
        stages.append({"stage": f"test:{name}", "status": "passed", "detail": "", "seconds": 20.0})
        write_json(f"{out}/tests/{name}.json", {"tests": count, "failures": 0, "testsuites": [
            {"name": "Suite", "testsuite": [{"name": f"case{i}"} for i in range(count)]}]})
    for name in ("quickstart:cpu-f32", "quickstart:cuda-f32", "quickstart:cuda-bf16", "quickstart-curves",
                 "determinism:run-f32", "determinism:run-bf16", "determinism", "quickstart:cuda-bf16-graph",
                 "cuda-graph", "mpi:collectives", "mpi:two-ranks"):
        stages.append({"stage": name, "status": "passed", "detail": "", "seconds": 12.0})
    if bench:
        st = {"stage": "bench", "status": bench, "detail": "", "seconds": 200.0}
        if bench_reason:
            st["reason"] = bench_reason
        stages.append(st)
    write_jsonl(f"{out}/stages.jsonl", stages)
    write_json(f"{out}/gpu.json", {"gpu": True, "name": "NVIDIA H100 80GB HBM3, 81559 MiB, 580.82.07"})
    write_json(f"{out}/cpu.json", {"model": "Intel(R) Xeon(R) Platinum 8480+", "cores": 16, "flags": {
        "avx2": True, "fma": True, "avx512f": True, "avx512_bf16": True, "amx_bf16": True, "amx_tile": True}})
    write_json(f"{out}/manifest.json", {"commit": "0123456789abcdef", "dirty": True, "subject": "a commit subject",
                                        "build_type": "Release", "cuda_architectures": "90a"})
    curve = {"final_loss": 4.1234, "eval_loss": 4.2, "tokens_per_s": 52000.0, "mean_rel_diff_last_100": 0.002,
             "tolerance": 0.02, "pass": True}
    write_json(f"{out}/quickstart.json", {"steps": 300, "cpu_final_loss": 4.12, "cpu_tokens_per_s": 9000.0,
                                          "cuda-f32": curve, "cuda-bf16": dict(curve, tolerance=0.05), "pass": True})
    same = {"steps": 300, "identical": True, "first_differing_step": None, "evals_within": 0.0}
    write_json(f"{out}/determinism.json", {"cuda-f32-again": same, "cuda-bf16-again": same, "pass": True})
    write_json(f"{out}/cuda_graph.json", {"cuda-bf16-graph": same, "pass": True})
    write_json(f"{out}/mpi.json", {"two": dict(same, steps=12), "pass": True})
    if bench_files:
        train, attn, payoff = bench_rows(lens)
        files = {"train.jsonl": train, "attention.jsonl": attn, "payoff.jsonl": payoff}
        for name, rows in files.items():
            if name not in (cut or ()):
                write_jsonl(f"{out}/bench/{name}", rows)
        write_json(f"{out}/bench/plan.json", {"quick": int(lens != FULL_LENS), "lens": lens, "dims": [64, 128, 256],
                                              "features": [64, 256], "payoff_lens": [1024, 8192, 32768],
                                              "batch": 16, "peak_tflops": 989})
        write_json(f"{out}/bench/summary.json", {"attention": {"sm90_over_mma_sync": {"d64_L4096": 1.41,
                                                                                      "d128_L4096": 1.52}}})
        with open(f"{out}/bench/failures.txt", "w") as f:
            f.write("".join(p + "\n" for p in failures))
    return out


def run(out):
    p = subprocess.run([sys.executable, SUMMARY, out], capture_output=True, text=True, timeout=60)
    if p.returncode != 0:
        raise AssertionError(f"gpu_check_summary.py exited {p.returncode}: {p.stderr}")
    with open(f"{out}/summary.json") as f:
        return p.stdout, json.load(f)


def table(summary_json):
    return {r["target"]: r for r in summary_json.get("targets_table", [])}


class MfuPeak(unittest.TestCase):
    """The MFU's peak comes from the GPU's name (gpu.json: nvidia-smi's "name, memory, driver")."""

    def test_peak_by_name(self):
        import importlib.util
        spec = importlib.util.spec_from_file_location("gpu_check_summary", SUMMARY)
        summary = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(summary)
        for name, tflops in (("NVIDIA H100 80GB HBM3, 81559 MiB, 580.82.07", 989.0),
                             ("NVIDIA H100 PCIe, 81559 MiB, 580.82.07", 756.0),
                             ("NVIDIA H100 NVL, 95830 MiB, 580.82.07", 835.0),
                             ("NVIDIA H200, 143771 MiB, 580.82.07", 989.0),
                             ("NVIDIA H200 NVL, 143771 MiB, 580.82.07", 835.0),
                             ("NVIDIA A100-SXM4-80GB, 81920 MiB, 550.54", 312.0),
                             ("NVIDIA L40S, 46068 MiB, 550.54", 362.0),
                             ("NVIDIA L4, 23034 MiB, 550.54", 121.0)):
            self.assertEqual(summary.bf16_peak(name)[0], tflops, name)
        tflops, source = summary.bf16_peak("Tesla T4, 15360 MiB, 535.1")
        self.assertEqual(tflops, 989.0)
        self.assertIn("assumed", source)

    def test_the_summary_says_which_peak(self):
        with tempfile.TemporaryDirectory() as tmp:
            text, s = run(make_out(tmp))
        self.assertIn("MFU against 989 TFLOPS of dense bf16 (H100 SXM datasheet", text)
        self.assertEqual(s["bench"]["mfu_peak"]["tflops"], 989.0)


class TargetsTable(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.addCleanup(self.tmp.cleanup)

    def test_full_set_of_rows(self):
        text, s = run(make_out(self.tmp.name))
        rows = table(s)
        self.assertEqual(len(rows), 35, sorted(rows))
        for name, r in rows.items():
            self.assertIn(r["status"].split(" ")[0], ("MET", "MISSED"), f"{name}: {r}")
            self.assertIn(f"|{name}|", text, "every row is in the printed table")
        for name, status in FULL_EXPECTED.items():
            self.assertEqual(rows[name]["status"], status, f"{name}: {rows[name]}")
        self.assertEqual(rows["flash d64 L1024"]["status"], "MISSED")  # 0.65 < 0.7
        self.assertEqual(rows["flash d64 L1024"]["ratio"], "0.65x")
        self.assertEqual(rows["flash d128 L8192"]["status"], "MET")
        self.assertEqual(rows["flash d256 L16384"]["status"], "MISSED")  # 0.8 < 0.9
        self.assertEqual(rows["darkformer m64 ms/call, L>=4096"]["status"], "MET")  # 2.31 ms
        self.assertEqual(rows["performer m256 vs SDPA, L>=16384"]["status"], "MET")
        self.assertEqual(rows["lfk m64 vs SDPA, L>=4096"]["status"], "MISSED")  # 2.04 ms against 2.0 at L 4096
        self.assertEqual(rows["darkformer m64 t(131072)/t(4096)"]["ratio"], "1.10x")
        self.assertEqual(rows["GPT-2-small step tok/s"]["ours"], "410000 tok/s")
        self.assertEqual(rows["GPT-2-small step tok/s"]["peer"], "450000 tok/s")
        self.assertEqual(rows["bf16 step tok/s vs f32"]["peer"], "95000 tok/s")
        self.assertIn("|target|goal|ours|peer|ratio|status|", text)
        self.assertLessEqual(len(text), 6000, f"the summary is {len(text)} characters")
        self.assertNotIn("left out for length", text, "the full case fits without leaving lines out")
        self.assertNotIn("FLASH", text.splitlines()[0])
        self.assertIn("train darkformer-f32: 95000 tok/s", text)

    def test_full_set_with_a_flash_fallback_fits(self):
        flash = {"stage": "flash-sm90", "status": "failed", "seconds": 3.0, "failure": "crash",
                 "failure_detail": "crash, SIGSEGV", "rc": 139, "fallback": "DARK_FLASH_SM90=off",
                 "detail": "crash, SIGSEGV (exit 139): every later stage ran with DARK_FLASH_SM90=off (the mma.sync "
                           "kernels); see tests/flash-sm90.log",
                 "safety_nets": ["flash_attention: self-check failed: the sm_90 kernels forward_sm90_kernel<64> " + "x" * 300
                                 ] * 5}
        text, s = run(make_out(self.tmp.name, flash=flash))
        lines = text.splitlines()
        self.assertEqual(lines[0], "FLASH FALLBACK: the Hopper (sm_90) flash tests failed (crash, SIGSEGV): every later "
                                   "stage ran on the mma.sync kernels (DARK_FLASH_SM90=off)")
        self.assertTrue(all(l.startswith("  sm_90 log: flash_attention: self-check failed") for l in lines[1:6]), lines[:6])
        self.assertIn("the flash rows ran on the mma.sync kernels (fallback)", text)
        self.assertLessEqual(len(text), 6000, f"the summary is {len(text)} characters")
        self.assertEqual(len(table(s)), 35)

    def test_safety_nets_of_later_stages_come_first(self):
        out = make_out(self.tmp.name)
        with open(f"{out}/tests/test_gpu_kernels.log", "w") as f:
            f.write("[ RUN      ] GpuKernels.MatchCpuFloat64/rfa_bf16\n"
                    "[2026-12-06 15:00:00.000] [error] random_feature_attention_forward: self-check failed: the bf16 "
                    "(tensor-core) kernel differs from the f32 kernel on the same inputs: argument 6 max |diff| 0.5\n"
                    "[       OK ] GpuKernels.MatchCpuFloat64/rfa_bf16 (3 ms)\n")
        text, s = run(out)
        lines = text.splitlines()
        self.assertTrue(lines[0].startswith("SAFETY NETS: kernels the library found wrong or hung"), lines[0])
        self.assertEqual(lines[1], "  log: random_feature_attention_forward: self-check failed: the bf16 (tensor-core) "
                                   "kernel differs from the f32 kernel on the same inputs: argument 6 max |diff| 0.5")
        self.assertLessEqual(len(text), 6000)

    def test_full_plan_fits(self):
        text, s = run(make_out(self.tmp.name, lens=FULL_LENS))
        self.assertTrue(all(r["status"].split(" ")[0] in ("MET", "MISSED") for r in table(s).values()))
        self.assertLessEqual(len(text), 6000, f"the summary is {len(text)} characters")

    def test_unplanned_length_says_not_measured(self):
        text, s = run(make_out(self.tmp.name, lens=NO_8192))
        rows = table(s)
        for d in (64, 128, 256):
            self.assertEqual(rows[f"flash d{d} L8192"]["status"], "missing: not measured by this run (--quick)")
        self.assertEqual(rows["flash d64 L16384"]["status"], "MET")
        self.assertLessEqual(len(text), 6000)

    def test_bench_skipped_for_budget(self):
        text, s = run(make_out(self.tmp.name, bench="skipped", bench_reason="budget", bench_files=False))
        rows = table(s)
        self.assertEqual(len(rows), 35)
        for name, r in rows.items():
            self.assertTrue(r["status"].startswith("missing: budget"), f"{name}: {r}")
            self.assertEqual((r["ours"], r["peer"], r["ratio"]), ("-", "-", "-"))
        self.assertIn("|missing: budget (bench skipped)|", text)

    def test_bench_cut_by_its_time_limit(self):
        # The limit stopped the bench after its training and attention rows: the payoff is missing.
        text, s = run(make_out(self.tmp.name, bench="failed", bench_reason="timeout", cut=("payoff.jsonl",)))
        rows = table(s)
        for L in (8192, 32768):
            self.assertEqual(rows[f"darkformer/softmax model tok/s, seq {L}"]["status"],
                             "missing: budget (bench cut by its time limit)")
        self.assertEqual(rows["GPT-2-small step tok/s"]["status"], "MISSED")

    def test_bench_failed(self):
        text, s = run(make_out(self.tmp.name, bench="failed", bench_reason="failed", bench_files=False))
        rows = table(s)
        for name, r in rows.items():
            self.assertTrue(r["status"].startswith("missing: failed"), f"{name}: {r}")
        self.assertIn("|missing: failed (see bench.log)|", text)

    def test_one_failed_part_takes_only_its_rows(self):
        out = make_out(self.tmp.name, bench="failed", bench_reason="failed", failures=["train:torch-compile"])
        with open(f"{out}/bench/train.jsonl") as f:
            train = [r for r in map(json.loads, f) if r.get("mode") != "compile"]
        write_jsonl(f"{out}/bench/train.jsonl", train)
        text, s = run(out)
        rows = table(s)
        self.assertEqual(rows["GPT-2-small step tok/s"]["status"], "missing: failed (train:torch-compile)")
        self.assertEqual(rows["GPT-2-small step tok/s"]["ours"], "410000 tok/s")
        self.assertEqual(rows["GPT-2-small MFU"]["status"], "MISSED")  # needs no peer
        self.assertEqual(rows["bf16 step tok/s vs f32"]["status"], "MET")

    def test_overlong_summary_keeps_first_lines_and_table(self):
        flash = {"stage": "flash-sm90", "status": "failed", "seconds": 60.0, "failure": "timeout",
                 "failure_detail": "timeout after 60 s", "detail": "timeout after 60 s (exit 124)", "safety_nets": []}
        out = make_out(self.tmp.name, flash=flash)
        with open(f"{out}/stages.jsonl", "a") as f:  # 30 failed stages, each with a long detail
            for i in range(30):
                f.write(json.dumps({"stage": f"extra:{i}", "status": "failed", "detail": "y" * 300}) + "\n")
        text, s = run(out)
        lines = text.splitlines()
        self.assertLessEqual(len(text), 6000, f"the summary is {len(text)} characters")
        self.assertTrue(lines[0].startswith("FLASH FALLBACK: the Hopper (sm_90) flash tests failed (timeout after 60 s)"))
        self.assertIn("(cut at 6000 characters; all of it is in summary.json)", text)
        for name in table(s):
            self.assertIn(f"|{name}|", text)
        self.assertTrue(lines[-1].startswith("|darkformer/softmax model tok/s, seq 32768|"), lines[-1])

    def test_no_bench_stage(self):
        text, s = run(make_out(self.tmp.name, bench=None, bench_files=False))
        self.assertNotIn("targets_table", s)
        self.assertIn("targets: not measured by this run (no bench stage)", text)


if __name__ == "__main__":
    unittest.main(argv=[sys.argv[0]] + [a for a in sys.argv[1:] if a.startswith("-")], verbosity=2)
