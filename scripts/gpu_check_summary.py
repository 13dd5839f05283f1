#!/usr/bin/env python3
"""The numbers of scripts/gpu-check.sh (standard library only: it runs on the GPU machine).

  gpu_check_summary.py OUT                 summary.json under OUT and a compact text summary
                                           (at most ~6,000 characters: little else comes back
                                           from the lent GPU machine) on stdout: first a line
                                           when the flash-sm90 stage failed and the check fell
                                           back to the mma.sync kernels, last a markdown table
                                           of every attention and training-throughput target
                                           beside its peer (MET, MISSED or missing: why)
  gpu_check_summary.py --curves OUT STEPS  quickstart CPU vs GPU loss curves -> JSON; exit 1
                                           when a curve is outside its tolerance
  gpu_check_summary.py --same OUT A A2 [B B2 ...]   runs OUT/quickstart/A and A2 (and B, B2,
                                           ...) logged the same losses and gradient norms bit
                                           for bit -> JSON; exit 1 otherwise
  gpu_check_summary.py --same-dirs D1 D2 [RTOL]   the same for two run folders, eval losses
                                           within RTOL (2 ranks add their eval sums in another
                                           order: float64 rounding)
"""
import glob
import json
import os
import re
import sys

LIMIT = 6000


def rate(row):
    """ ' (N GB/s)' or ' (N TFLOP/s)' for a profile row: tensor bytes or matmul FLOPs over its time."""
    seconds = row["ms_per_step"] / 1e3
    if seconds <= 0:
        return ""
    if row.get("tflop_per_step"):
        return f" ({row['tflop_per_step'] / seconds:.0f} TFLOP/s)"
    return f" ({row.get('gb_per_step', 0) / seconds:.0f} GB/s)" if row.get("gb_per_step") else ""

def metrics(run):
    """(step lines {step: (loss, grad_norm)}, eval losses in order) of a run folder."""
    steps, evals = {}, []
    with open(os.path.join(run, "metrics.jsonl")) as f:
        for line in f:
            j = json.loads(line)
            if "loss" in j and "step" in j:
                steps[j["step"]] = (j["loss"], j.get("grad_norm"), j.get("tokens_per_s", 0))
            if "eval_loss" in j:
                evals.append(j["eval_loss"])
    return steps, evals


def curves(out, steps):
    cpu, _ = metrics(f"{out}/quickstart/cpu-f32")
    result = {"steps": steps, "cpu_final_loss": cpu[steps][0], "cpu_tokens_per_s": cpu[steps][2]}
    ok = True
    for name, tol in (("cuda-f32", 0.02), ("cuda-bf16", 0.05)):
        c, evals = metrics(f"{out}/quickstart/{name}")
        window = range(max(1, steps - 99), steps + 1)
        diff = sum(abs(c[s][0] - cpu[s][0]) / cpu[s][0] for s in window) / len(window)
        result[name] = {"final_loss": c[steps][0], "eval_loss": evals[-1] if evals else None,
                        "tokens_per_s": c[steps][2], "mean_rel_diff_last_100": diff, "tolerance": tol,
                        "pass": diff <= tol}
        ok = ok and diff <= tol
    result["pass"] = ok
    print(json.dumps(result, indent=1))
    return 0 if ok else 1


def same(pairs, eval_rtol=0.0):
    """Every step's loss and gradient norm equal bit for bit; eval losses within eval_rtol."""
    result, ok = {}, True
    for a, b in pairs:
        sa, ea = metrics(a)
        sb, eb = metrics(b)
        differing = [s for s in sorted(sa) if s not in sb or sa[s][:2] != sb[s][:2]]
        evals_ok = len(ea) == len(eb) and all(abs(x - y) <= eval_rtol * abs(x) for x, y in zip(ea, eb))
        equal = bool(sa) and not differing and sorted(sa) == sorted(sb) and evals_ok
        result[os.path.basename(b)] = {"steps": len(sa), "identical": equal, "first_differing_step":
                                       differing[0] if differing else None,
                                       "evals_within": eval_rtol if evals_ok else None}
        ok = ok and equal
    result["pass"] = ok
    print(json.dumps(result, indent=1))
    return 0 if ok else 1


def load(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def jsonl(path):
    rows = []
    if os.path.exists(path):
        for line in open(path):
            line = line.strip()
            if line.startswith("{"):
                try:
                    rows.append(json.loads(line))
                except ValueError:
                    pass
    return rows


def tests_summary(out):
    result = {}
    for path in sorted(glob.glob(f"{out}/tests/*.json")):
        j = load(path) or {}
        suites = j.get("testsuites", [])
        failed = [f"{s['name']}.{c['name']}" for s in suites for c in s.get("testsuite", []) if c.get("failures")]
        skipped = sum(1 for s in suites for c in s.get("testsuite", []) if c.get("result") == "SKIPPED")
        result[os.path.basename(path)[:-5]] = {"tests": j.get("tests"), "failures": j.get("failures"),
                                               "skipped": skipped, "failed": failed[:20]}
    return result


def darkformer_row(train, precision, graph):
    """Our training row of train.jsonl in `precision`, with or without training.cuda_graph (None: absent)."""
    return next((r for r in train if r.get("side") == "darkformer" and r.get("precision", "bf16") == precision
                 and bool(r.get("cuda_graph")) == graph and "tokens_per_s" in r), None)


# Dense bf16 tensor-core peaks (TFLOPS, without sparsity) from NVIDIA's product datasheets, by the
# words of the name nvidia-smi reports ("NVIDIA H100 80GB HBM3", "NVIDIA A100-SXM4-80GB"): the
# first entry whose words all appear in the name, so the more specific entries come first.
BF16_PEAKS = (
    (("H200", "NVL"), 835.0, "H200 NVL datasheet"),
    (("H200",), 989.0, "H200 SXM datasheet: 1,979 with sparsity"),
    (("H100", "NVL"), 835.0, "H100 NVL datasheet"),
    (("H100", "PCIe"), 756.0, "H100 PCIe datasheet: 1,513 with sparsity"),
    (("H100",), 989.0, "H100 SXM datasheet: 1,979 with sparsity"),
    (("A100",), 312.0, "A100 datasheet: 624 with sparsity"),
    (("L40S",), 362.0, "L40S datasheet: 733 with sparsity"),
    (("L4",), 121.0, "L4 datasheet: 242 with sparsity"),
)


def bf16_peak(gpu_name):
    """(TFLOPS, where the number comes from) for the GPU named `gpu_name`; an unknown GPU gets H100
    SXM's peak, and the source says so."""
    words = set(re.split(r"[\s,\-]+", gpu_name or ""))  # gpu.json's name is nvidia-smi's "name, memory, driver"
    for needed, tflops, source in BF16_PEAKS:
        if set(needed) <= words:
            return tflops, source
    return 989.0, f"no entry for {gpu_name!r}: H100 SXM's 989 assumed"


def bench_summary(out, peak_tflops=989.0):
    train = jsonl(f"{out}/bench/train.jsonl")
    attn = jsonl(f"{out}/bench/attention.jsonl")
    s = {"train": {}, "attention": []}
    ours, ours_graph, ours_f32 = (darkformer_row(train, "bf16", False), darkformer_row(train, "bf16", True),
                                  darkformer_row(train, "f32", False))
    if ours:
        m = ours["model"]
        per_token = 6 * ours["parameters"] + 6 * m["n_layers"] * m["seq_len"] * m["d_model"]
        s["train"]["darkformer"] = {"tokens_per_s": ours["tokens_per_s"],
                                    "mfu": ours["tokens_per_s"] * per_token / (peak_tflops * 1e12),
                                    "step_ms": ours.get("median_step_ms"), "phases_ms": ours.get("phases_ms"),
                                    "alloc_peak_mb": ours.get("alloc_peak_mb"), "profile": ours.get("profile")}
        if ours_graph:
            s["train"]["darkformer-graph"] = {"tokens_per_s": ours_graph["tokens_per_s"],
                                              "mfu": ours_graph["tokens_per_s"] * per_token / (peak_tflops * 1e12),
                                              "step_ms": ours_graph.get("median_step_ms"),
                                              "alloc_peak_mb": ours_graph.get("alloc_peak_mb")}
        if ours_f32:
            s["train"]["darkformer-f32"] = {"tokens_per_s": ours_f32["tokens_per_s"],
                                            "mfu": ours_f32["tokens_per_s"] * per_token / (peak_tflops * 1e12),
                                            "step_ms": ours_f32.get("median_step_ms"),
                                            "alloc_peak_mb": ours_f32.get("alloc_peak_mb")}
        for r in train:
            if r.get("side") == "torch":
                s["train"][f"torch-{r['mode']}"] = {"tokens_per_s": r["tokens_per_s"],
                                                    "mfu": r["tokens_per_s"] * per_token / (peak_tflops * 1e12),
                                                    "peak_mem_mib": r.get("peak_mem_mib")}
    for r in attn:
        if "ms" in r:
            s["attention"].append({k: r.get(k) for k in ("side", "kind", "m", "d", "len", "ms", "tflops")})
    bench_json = load(f"{out}/bench/summary.json") or {}
    if bench_json.get("targets"):
        s["targets"] = bench_json["targets"]
    gains = (bench_json.get("attention") or {}).get("sm90_over_mma_sync")
    if gains:  # the Hopper flash kernels against the mma.sync ones (DARK_FLASH_SM90=off)
        s["sm90_over_mma_sync"] = gains
    return s


def fmt_attention(rows):
    """One line per (d, L): our softmax and SDPA (ms, TFLOP/s) and the random-feature kinds (ms);
    the ratios to SDPA are in the targets table."""
    ours = {(r["kind"], r["m"], r["d"], r["len"]): r for r in rows if r.get("side") != "torch"}
    sdpa = {(r["d"], r["len"]): r for r in rows if r.get("side") == "torch"}
    lines = ["attention ms per call (fwd+bwd): d L | flash (TF/s) | sdpa | perf64 lfk64 dark64 | perf256 dark256"]
    for d in sorted({k[2] for k in ours} | {k[0] for k in sdpa}):
        for L in sorted({k[3] for k in ours if k[2] == d} | {k[1] for k in sdpa if k[0] == d}):
            s, t = ours.get(("softmax", 0, d, L)), sdpa.get((d, L))
            cell = lambda r: f"{r['ms']:.2f}" if r else "-"
            tf = lambda r: f"{r['ms']:.2f} ({r['tflops']:.0f})" if r and r.get("tflops") else cell(r)
            rf = " ".join(cell(ours.get((k, m, d, L))) for m, k in ((64, "performer"), (64, "lfk"), (64, "darkformer")))
            rf2 = " ".join(cell(ours.get((k, 256, d, L))) for k in ("performer", "darkformer"))
            lines.append(f"  {d} {L} | {tf(s)} | {cell(t)} | {rf} | {rf2}")
    return lines if len(lines) > 1 else []


# ---- the targets table: every target of the attention and training-throughput work, beside
# its measured value and its peer measured in the same run (markdown, pasted into issues) ----

FLASH_LENS = (1024, 2048, 4096, 8192, 16384)
RF_KINDS = ("performer", "lfk", "darkformer")
RF_TOKENS = 131072  # tokens per attention call (bench_gpu_attention's default: batch = tokens / L)


class BenchRows:
    """The bench folder's rows, and why one that is absent is missing."""

    def __init__(self, out, stages):
        self.stage = next((st for st in stages if st["stage"] == "bench"), None)
        self.plan = load(f"{out}/bench/plan.json") or {}
        path = f"{out}/bench/failures.txt"
        self.failures = [l.strip() for l in open(path) if l.strip()] if os.path.exists(path) else []
        train = jsonl(f"{out}/bench/train.jsonl")
        self.bf16, self.f32 = darkformer_row(train, "bf16", False), darkformer_row(train, "f32", False)
        self.torch = {r["mode"]: r for r in train if r.get("side") == "torch" and "tokens_per_s" in r}
        attn = jsonl(f"{out}/bench/attention.jsonl")
        self.ours = {(r["kind"], r["m"], r["d"], r["len"]): r for r in attn
                     if r.get("side") != "torch" and "ms" in r and "kind" in r}
        self.sdpa = {(r["d"], r["len"]): r for r in attn if r.get("side") == "torch" and "ms" in r}
        # Rows a program left out on purpose: ours "predicted over --budget-s", SDPA out of memory.
        self.skipped = {}
        for r in attn:
            if "skipped" in r and r.get("side") != "torch":
                kind, m, d = r["skipped"].split("/")
                self.skipped[(kind, int(m), int(d), r["len"])] = r.get("reason", "")
            elif "skipped" in r:
                self.skipped[("sdpa", r.get("d"), r["len"])] = r.get("reason", "")
        payoff = jsonl(f"{out}/bench/payoff.jsonl")
        self.payoff = {(r["payoff_kind"], r["payoff_len"]): r for r in payoff if "tokens_per_s" in r}

    def why(self, parts, planned=None, skip_key=None):
        """Why a row is missing: 'budget ...', 'failed ...' or 'not measured ...'. parts: the bench
        parts that make its numbers (failures.txt's names); planned: (plan key, value) it needs."""
        st = self.stage
        if st is None:
            return "not measured by this run (no bench stage)"
        if st["status"] == "skipped":
            return "budget (bench skipped)"
        if planned and self.plan.get(planned[0]) and planned[1] not in self.plan[planned[0]]:
            return "not measured by this run" + (" (--quick)" if self.plan.get("quick") else "")
        failed = [p for p in parts if p in self.failures]
        if failed:
            return f"failed ({failed[0]})"
        reason = self.skipped.get(skip_key) if skip_key else None
        if reason:
            return ("budget (" if "budget" in reason else "failed (") + reason + ")"
        if st.get("reason") == "timeout" or "time limit" in st.get("detail", ""):
            return "budget (bench cut by its time limit)"
        if st["status"] == "failed":
            return "failed (see bench.log)"
        return "not measured by this run"


def targets_table(out, stages, peak_tflops=989.0):
    """(rows, lines): one row per target {target, goal, ours, peer, ratio, status}, and the table."""
    b = BenchRows(out, stages)
    rows = []

    def row(target, goal, ours, peer, ratio, met, why=None, note=""):
        """ours / peer: cells (text or None); met: True, False or None (missing: why())."""
        status = ("MET" if met else "MISSED") + (f" ({note})" if note else "") if met is not None else f"missing: {why()}"
        rows.append({"target": target, "goal": goal, "ours": ours or "-", "peer": peer or "-",
                     "ratio": f"{ratio:.2f}x" if ratio is not None else "-", "status": status})

    # Training: the GPT-2-small-sized step (bf16, batch x 1024) against PyTorch + torch.compile.
    ours, peer, f32 = b.bf16, b.torch.get("compile"), b.f32
    model = (ours or f32 or {}).get("model")
    per_token = 6 * (ours or f32)["parameters"] + 6 * model["n_layers"] * model["seq_len"] * model["d_model"] if model else None
    mfu = lambda r: r["tokens_per_s"] * per_token / (peak_tflops * 1e12) if r and per_token else None
    tok = lambda r: f"{r['tokens_per_s']:.0f} tok/s" if r else None
    need_train = lambda *parts: (lambda: b.why(parts))
    both = ours and peer
    ratio = ours["tokens_per_s"] / peer["tokens_per_s"] if both else None
    row("GPT-2-small step tok/s", ">=1.0x compile", tok(ours), tok(peer), ratio, None if ratio is None else ratio >= 1.0,
        need_train("train:darkformer-bf16", "train:torch-compile"))
    m_ours, m_peer = mfu(ours), mfu(peer)
    row("GPT-2-small MFU", ">=40%", f"{100 * m_ours:.1f}%" if m_ours else None, f"{100 * m_peer:.1f}%" if m_peer else None,
        m_ours / m_peer if m_ours and m_peer else None, None if m_ours is None else m_ours >= 0.40,
        need_train("train:darkformer-bf16"))
    mem = lambda r, k: f"{r[k]:.0f} MiB" if r and r.get(k) else None
    ratio = ours["alloc_peak_mb"] / peer["peak_mem_mib"] if both and ours.get("alloc_peak_mb") and peer.get("peak_mem_mib") else None
    row("GPT-2-small peak memory", "<=1.0x compile", mem(ours, "alloc_peak_mb"), mem(peer, "peak_mem_mib"), ratio,
        None if ratio is None else ratio <= 1.0, need_train("train:darkformer-bf16", "train:torch-compile"))
    ratio = ours["tokens_per_s"] / f32["tokens_per_s"] if ours and f32 else None
    row("bf16 step tok/s vs f32", ">=2.0x f32", tok(ours), tok(f32), ratio, None if ratio is None else ratio >= 2.0,
        need_train("train:darkformer-bf16", "train:darkformer-f32"))

    # Flash forward + backward against SDPA (TFLOP/s, bf16).
    for d in (64, 128, 256):
        for L in FLASH_LENS:
            s, t = b.ours.get(("softmax", 0, d, L)), b.sdpa.get((d, L))
            want = 0.7 if L == 1024 else 0.9
            ratio = s["tflops"] / t["tflops"] if s and t and s.get("tflops") and t.get("tflops") else None
            skip = ("softmax", 0, d, L) if not s else ("sdpa", d, L)
            row(f"flash d{d} L{L}", f">={want}x SDPA TF/s", f"{s['tflops']:.0f}" if s else None,
                f"{t['tflops']:.0f}" if t else None, ratio, None if ratio is None else ratio >= want,
                lambda s=s, skip=skip, L=L: b.why(["attention:darkformer"] if not s else ["attention:torch"], ("lens", L), skip))

    # Random-feature attention, d 64, per call of 131072 tokens (forward + backward, bf16).
    ms = lambda r: f"{r['ms']:.2f} ms" if r else None
    lens = sorted({k[3] for k in b.ours} | set(b.plan.get("lens", [])))

    def gaps(kind, m, lo, peer_needed):
        """The planned lengths >= lo with no row (a note for a status computed on the others)."""
        miss = [L for L in b.plan.get("lens", []) if L >= lo and ((kind, m, 64, L) not in b.ours or
                                                                   (peer_needed and (64, L) not in b.sdpa))]
        return f"no L {','.join(str(L) for L in miss)}" if miss else ""

    def rf_why(kind, m, lo, peer_needed=False):
        parts = ["attention:darkformer"] + (["attention:torch"] if peer_needed else [])
        return lambda: b.why(parts, None, next(((kind, m, 64, L) for L in lens if L >= lo and (kind, m, 64, L) in b.skipped),
                                              None))

    for kind in RF_KINDS:
        times = [(L, b.ours[(kind, 64, 64, L)]) for L in lens if L >= 4096 and (kind, 64, 64, L) in b.ours]
        worst = max(times, key=lambda p: p[1]["ms"]) if times else None
        t = b.sdpa.get((64, worst[0])) if worst else None
        row(f"{kind} m64 ms/call, L>=4096", "<=3 ms",
            f"{worst[1]['ms']:.2f} ms @{worst[0]}" if worst else None, ms(t),
            worst[1]["ms"] / t["ms"] if worst and t else None, None if worst is None else worst[1]["ms"] <= 3.0,
            rf_why(kind, 64, 4096), gaps(kind, 64, 4096, False) if worst else "")
    for m, lo in ((64, 4096), (256, 16384)):
        for kind in RF_KINDS:
            pairs = [(L, b.ours[(kind, m, 64, L)], b.sdpa[(64, L)]) for L in lens
                     if L >= lo and (kind, m, 64, L) in b.ours and (64, L) in b.sdpa]
            worst = max(pairs, key=lambda p: p[1]["ms"] / p[2]["ms"]) if pairs else None
            ratio = worst[1]["ms"] / worst[2]["ms"] if worst else None
            row(f"{kind} m{m} vs SDPA, L>={lo}", "<1.0x SDPA ms", f"{worst[1]['ms']:.2f} ms @{worst[0]}" if worst else None,
                ms(worst[2]) if worst else None, ratio, None if ratio is None else ratio < 1.0,
                rf_why(kind, m, lo, True), gaps(kind, m, lo, True) if worst else "")
    for kind in RF_KINDS:
        hi, lo = b.ours.get((kind, 64, 64, RF_TOKENS)), b.ours.get((kind, 64, 64, 4096))
        ratio = hi["ms"] / lo["ms"] if hi and lo else None
        row(f"{kind} m64 t({RF_TOKENS})/t(4096)", "<=1.2x", ms(hi), ms(lo), ratio, None if ratio is None else ratio <= 1.2,
            lambda kind=kind, hi=hi: b.why(["attention:darkformer"], ("lens", RF_TOKENS if not hi else 4096),
                                           (kind, 64, 64, RF_TOKENS if not hi else 4096)))
    for m in (64, 256):
        pairs = [(L, b.ours[("darkformer", m, 64, L)], b.ours[("performer", m, 64, L)]) for L in lens
                 if ("darkformer", m, 64, L) in b.ours and ("performer", m, 64, L) in b.ours]
        worst = max(pairs, key=lambda p: p[1]["ms"] / p[2]["ms"]) if pairs else None
        ratio = worst[1]["ms"] / worst[2]["ms"] if worst else None
        row(f"darkformer/performer m{m}", "<=1.10x", f"{worst[1]['ms']:.2f} ms @{worst[0]}" if worst else None,
            ms(worst[2]) if worst else None, ratio, None if ratio is None else ratio <= 1.10,
            rf_why("darkformer", m, 0))

    # The payoff in training: model tokens/s, darkformer (m 64) against softmax, 32768 tokens a step.
    for L, want in ((8192, 2.0), (32768, 5.0)):
        d, s = b.payoff.get(("darkformer", L)), b.payoff.get(("softmax", L))
        ratio = d["tokens_per_s"] / s["tokens_per_s"] if d and s else None
        row(f"darkformer/softmax model tok/s, seq {L}", f">={want:.0f}x softmax", tok(d), tok(s), ratio,
            None if ratio is None else ratio >= want,
            lambda L=L: b.why([f"payoff:darkformer:{L}", f"payoff:softmax:{L}"], ("payoff_lens", L)))

    counts = {k: sum(r["status"].startswith(k) for r in rows) for k in ("MET", "MISSED", "missing")}
    lines = [f"targets: {counts['MET']} MET, {counts['MISSED']} MISSED, {counts['missing']} missing "
             "(bf16; attention forward + backward, random features at d 64 and 131072 tokens a call; "
             "peer measured in the same run)",
             "|target|goal|ours|peer|ratio|status|", "|-|-|-|-|-|-|"]
    lines += [f"|{r['target']}|{r['goal']}|{r['ours']}|{r['peer']}|{r['ratio']}|{r['status']}|" for r in rows]
    return rows, lines


def flash_lines(stages):
    """The summary's first lines: the flash-sm90 stage failed and every later stage fell back to
    the mma.sync kernels (which failure it was), and what the library's sm_90 safety nets logged."""
    flash = next((st for st in stages if st["stage"] == "flash-sm90"), None)
    if flash is None:
        return []
    lines = []
    if flash["status"] == "failed":
        what = flash.get("failure_detail") or flash.get("failure") or flash.get("detail", "")[:120]
        lines.append(f"FLASH FALLBACK: the Hopper (sm_90) flash tests failed ({what}): every later stage ran on the "
                     "mma.sync kernels (DARK_FLASH_SM90=off)")
    elif flash.get("safety_nets"):
        lines.append("FLASH SAFETY NETS: the flash tests passed, but the library's sm_90 safety nets triggered:")
    if flash.get("caller_env"):
        lines.append(f"  note: {flash['caller_env']} was set by the caller for the flash stage too")
    lines += [f"  sm_90 log: {l[:240]}" for l in flash.get("safety_nets", [])[:5]]
    return lines


# What the library logs when a safety net catches a kernel (core/cuda/flash_attention_sm90_guard.h,
# bf16_reference_check.h, hang_report.h): a self-check that failed, a fallback, a hang's report.
NET_PATTERN = re.compile(r"self-check failed|falls back to the|\(loading\) waited over")


def net_lines_in_logs(out):
    """The safety-net lines of every stage's logs but the flash stage's (its own are in its
    record), without spdlog's prefixes, each once, 5 at most: the kernels these stages found
    wrong or hung and replaced (their tests pass on the replacement)."""
    found = []
    for root, _, files in sorted(os.walk(out)):
        for name in sorted(files):
            if not name.endswith(".log") or name == "flash-sm90.log":
                continue
            try:
                with open(os.path.join(root, name), errors="replace") as f:
                    for line in f:
                        if NET_PATTERN.search(line):
                            text = re.sub(r"^(\[[^]]*\] *)+", "", line.strip())
                            if text not in found:
                                found.append(text)
            except OSError:
                pass
    return found[:5]


def summary(out):
    stages = [json.loads(l) for l in open(f"{out}/stages.jsonl") if l.strip()] if os.path.exists(
        f"{out}/stages.jsonl") else []
    s = {"stages": stages}
    for name in ("manifest", "cpu", "gpu", "quickstart", "determinism", "cuda_graph", "mpi"):
        v = load(f"{out}/{name}.json")
        if v is not None:
            s[name] = v
    if "manifest" in s:
        s["manifest"].pop("files", None)
    tests = tests_summary(out)
    if tests:
        s["tests"] = tests
    peak, peak_source = bf16_peak(s.get("gpu", {}).get("name"))
    if os.path.isdir(f"{out}/bench"):
        s["bench"] = bench_summary(out, peak)
        s["bench"]["mfu_peak"] = {"tflops": peak, "source": peak_source}
    with_table = os.path.isdir(f"{out}/bench") or any(st["stage"] == "bench" for st in stages)
    if with_table:
        s["targets_table"], table = targets_table(out, stages, peak)
    with open(f"{out}/summary.json", "w") as f:
        json.dump(s, f, indent=1)

    # (text, keep): lines with keep 2 are left out first, then keep 1, when the summary is too long.
    lines = [(l, 0) for l in flash_lines(stages)]
    fallback = any(l.startswith("FLASH FALLBACK") for l, _ in lines)
    nets = net_lines_in_logs(out)
    if nets:
        lines.append(("SAFETY NETS: kernels the library found wrong or hung in the later stages, and replaced "
                      "(their tests then pass on the replacement):", 0))
        lines += [(f"  log: {l[:240]}", 0) for l in nets]
    lines += summary_lines(s, tests, out, fallback)
    failed = [st["stage"] for st in stages if st["status"] == "failed"]
    lines.append(("failed stages: " + (", ".join(failed) if failed else "none"), 0))
    # The table last, blank lines around its title: pasted into an issue, it renders as a table.
    if with_table:
        if fallback:
            table[0] += "; the flash rows ran on the mma.sync kernels (fallback)"
        lines += [("", 0), (table[0], 0), ("", 0)] + [(l, 0) for l in table[1:]]
    elif gpu_found(s):
        lines.append(("targets: not measured by this run (no bench stage)", 0))
    text = "\n".join(l for l, _ in lines)
    for level, what in ((2, "per-L attention lines"), (1, "kernel profile")):
        if len(text) < LIMIT:  # with print's newline, at most LIMIT characters
            break
        at = next((i for i, (_, k) in enumerate(lines) if k == level), None)
        if at is not None:  # a note where they were
            lines = lines[:at] + [(f"({what} left out for length: see summary.json)", 0)] + \
                [(l, k) for l, k in lines[at:] if k != level]
        text = "\n".join(l for l, _ in lines)
    if len(text) >= LIMIT:  # cut what comes before the table: the first lines and the table stay
        tail = "\n".join(l for l, _ in lines[len(lines) - (len(table) + 2):]) if with_table else ""
        note = "\n... (cut at %d characters; all of it is in summary.json)" % LIMIT
        head = text[:len(text) - len(tail)] if tail else text
        text = head[:max(0, LIMIT - len(tail) - len(note) - 2)] + note + ("\n" + tail if tail else "")
    print(text)
    return 0


def gpu_found(s):
    return bool(s.get("gpu", {}).get("gpu"))


def stage_groups(stages):
    """'name Ns' for each stage, those of one prefix (test:..., mpi:...) as one: 'test (6) 120s';
    the status unless passed (a failed one is named, with its detail, on a line of its own)."""
    groups = {}
    for st in stages:
        groups.setdefault(st["stage"].split(":")[0], []).append(st)
    cells = []
    for name, sts in groups.items():
        statuses = {st["status"] for st in sts}
        status = "failed" if "failed" in statuses else "skipped" if statuses == {"skipped"} else \
            "passed" if statuses <= {"passed", "skipped"} else "/".join(sorted(statuses))
        seconds = sum(st.get("seconds") or 0 for st in sts)
        cells.append(name + (f" ({len(sts)})" if len(sts) > 1 else "") + ("" if status == "passed" else f" {status}") +
                     (f" {seconds:.0f}s" if seconds else ""))
    return cells


def summary_lines(s, tests, out, fallback):
    """Every line of the summary between its first (flash) lines and the targets table, as
    (text, keep) pairs."""
    stages = s["stages"]
    lines = []

    def add(text, keep=0):
        lines.append((text, keep))

    m = s.get("manifest")
    if m:
        add(f"bundle: {m.get('commit', '?')[:12]}{' (dirty tree)' if m.get('dirty') else ''} "
            f"\"{m.get('subject', '')[:70]}\", {m.get('build_type')} sm_{m.get('cuda_architectures')}")
    cpu = s.get("cpu", {})
    if cpu:
        flags = cpu.get("flags", {})
        add(f"CPU: {cpu.get('model')}, {cpu.get('cores')} cores; " +
            ", ".join(f"{k} {'yes' if v else 'no'}" for k, v in flags.items()))
        if flags.get("avx512_bf16") or flags.get("amx_bf16"):
            add("  this CPU has bf16 instructions (darkformer's CPU kernels do not use them yet)")
    gpu = s.get("gpu", {})
    add(f"GPU: {gpu.get('name')}" if gpu.get("gpu") else "GPU: none (no GPU: nothing to check)")
    add("stages: " + " | ".join(stage_groups(stages)))
    for st in stages:
        if st["status"] == "failed" and st.get("detail"):
            add(f"  {st['stage']}: {st['detail'][:300]}")
    cells = []
    for name, t in tests.items():
        passed = (t["tests"] or 0) - (t["failures"] or 0) - t["skipped"]
        cells.append(f"{name} {passed}/{t['tests']}" + (f" ({t['skipped']} skipped)" if t["skipped"] else ""))
    if cells:
        add("tests passed: " + ", ".join(cells))
    for name, t in tests.items():
        if t["failed"]:
            add(f"  {name} failed: " + ", ".join(t["failed"][:8]))
    q = s.get("quickstart")
    if q:
        add(f"quickstart {q['steps']} steps: cpu loss {q['cpu_final_loss']:.4f} ({q['cpu_tokens_per_s']:.0f} tok/s)" +
            "".join(f"; {n} {q[n]['final_loss']:.4f}, mean rel diff {100 * q[n]['mean_rel_diff_last_100']:.2f}% "
                    f"(tol {100 * q[n]['tolerance']:.0f}%), {q[n]['tokens_per_s']:.0f} tok/s"
                    for n in ("cuda-f32", "cuda-bf16") if n in q))
    d = s.get("determinism")
    if d:
        add("determinism: " + "; ".join(f"{k}: {'same bits' if v['identical'] else 'DIFFERS from step ' + str(v['first_differing_step'])} over {v['steps']} steps"
                                        for k, v in d.items() if isinstance(v, dict)))
    g = s.get("cuda_graph")
    if g and isinstance(g.get("cuda-bf16-graph"), dict):
        v, rates = g["cuda-bf16-graph"], {}
        for name in ("cuda-bf16", "cuda-bf16-graph"):
            try:
                steps_seen, _ = metrics(f"{out}/quickstart/{name}")
                rates[name] = steps_seen[max(steps_seen)][2]
            except (OSError, ValueError, KeyError):
                pass
        add("cuda graph (bf16 quickstart): " +
            ("same bits as eager" if v["identical"] else f"DIFFERS from step {v['first_differing_step']}") +
            "".join(f"; {k} {r:.0f} tok/s" for k, r in rates.items()))
    mp = s.get("mpi")
    if mp:
        add("mpi 2 ranks vs 1 process (CPU): " + ("same bits" if mp.get("pass") else "DIFFERENT") +
            f" over {next((v['steps'] for v in mp.values() if isinstance(v, dict)), 0)} steps")
    bench = s.get("bench")
    if bench:
        add(f"MFU against {bench['mfu_peak']['tflops']:.0f} TFLOPS of dense bf16 ({bench['mfu_peak']['source']})")
        for name, r in bench["train"].items():
            extra = f", peak {r.get('alloc_peak_mb') or r.get('peak_mem_mib') or 0:.0f} MiB"
            if r.get("phases_ms"):
                extra += ", phases " + " ".join(f"{k} {v:.1f}" for k, v in r["phases_ms"].items()) + " ms"
            add(f"train {name}: {r['tokens_per_s']:.0f} tok/s, MFU {100 * r['mfu']:.1f}%{extra}")
            prof = r.get("profile")
            if prof:  # bench_train --profile: where the step's device time goes
                add(f"  kernels {prof['kernels_ms_per_step']:.1f} ms of a {prof['median_step_ms']:.1f} ms step; top: " +
           ", ".join(f"{p['phase']}/{p['kernel']} {p['ms_per_step']:.1f}{rate(p)}" for p in prof["rows"][:10]), 1)
        lines += [(l, 2) for l in fmt_attention(bench["attention"])]
        if bench.get("sm90_over_mma_sync"):
            add("flash, Hopper kernels over mma.sync ones (time ratio): " +
       ", ".join(f"{k} {v:.2f}x" for k, v in bench["sm90_over_mma_sync"].items()) +
       (" (meaningless here: the fallback ran both on mma.sync)" if fallback else ""))
    return lines


def main(argv):
    if argv[:1] == ["--curves"]:
        return curves(argv[1], int(argv[2]))
    if argv[:1] == ["--same"]:
        out, names = argv[1], argv[2:]
        return same([(f"{out}/quickstart/{names[i]}", f"{out}/quickstart/{names[i + 1]}")
                     for i in range(0, len(names), 2)])
    if argv[:1] == ["--same-dirs"]:
        return same([(argv[1], argv[2])], float(argv[3]) if len(argv) > 3 else 0.0)
    if len(argv) == 1:
        return summary(argv[0])
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
