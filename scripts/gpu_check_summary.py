#!/usr/bin/env python3
"""The numbers of scripts/gpu-check.sh (standard library only: it runs on the GPU machine).

  gpu_check_summary.py OUT                 summary.json under OUT and a compact text summary
                                           (at most ~6,000 characters: little else comes back
                                           from the lent GPU machine) on stdout
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


def bench_summary(out, peak_tflops=989.0):
    train = jsonl(f"{out}/bench/train.jsonl")
    attn = jsonl(f"{out}/bench/attention.jsonl")
    s = {"train": {}, "attention": []}
    ours = next((r for r in train if r.get("side") == "darkformer" and not r.get("cuda_graph")), None)
    ours_graph = next((r for r in train if r.get("side") == "darkformer" and r.get("cuda_graph")), None)
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
    """One line per (d, L): our softmax and SDPA (ms, TFLOP/s) and the random-feature kinds (ms)."""
    lines = []
    ours = {(r["kind"], r["m"], r["d"], r["len"]): r for r in rows if r.get("side") != "torch"}
    sdpa = {(r["d"], r["len"]): r for r in rows if r.get("side") == "torch"}
    for d in sorted({k[2] for k in ours} | {k[0] for k in sdpa}):
        lines.append(f"  d {d}: L | softmax ms (TF/s) | sdpa ms (TF/s) | ratio | perf64 lfk64 dark64 | perf256 dark256 (ms)")
        for L in sorted({k[3] for k in ours if k[2] == d} | {k[1] for k in sdpa if k[0] == d}):
            s, t = ours.get(("softmax", 0, d, L)), sdpa.get((d, L))
            cell = lambda r: f"{r['ms']:.2f}" if r else "-"
            tf = lambda r: f"{r['ms']:.2f} ({r['tflops']:.0f})" if r and r.get("tflops") else cell(r)
            ratio = f"{s['tflops'] / t['tflops']:.2f}x" if s and t and s.get("tflops") and t.get("tflops") else "-"
            rf = " ".join(cell(ours.get((k, m, d, L))) for m, k in ((64, "performer"), (64, "lfk"), (64, "darkformer")))
            rf2 = " ".join(cell(ours.get((k, 256, d, L))) for k in ("performer", "darkformer"))
            lines.append(f"    {L} | {tf(s)} | {tf(t)} | {ratio} | {rf} | {rf2}")
    return lines


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
    if os.path.isdir(f"{out}/bench"):
        s["bench"] = bench_summary(out)
    with open(f"{out}/summary.json", "w") as f:
        json.dump(s, f, indent=1)

    lines = []
    m = s.get("manifest")
    if m:
        lines.append(f"bundle: {m.get('commit', '?')[:12]}{' (dirty tree)' if m.get('dirty') else ''} "
                     f"\"{m.get('subject', '')[:70]}\", {m.get('build_type')} sm_{m.get('cuda_architectures')}")
    cpu = s.get("cpu", {})
    if cpu:
        flags = cpu.get("flags", {})
        lines.append(f"CPU: {cpu.get('model')}, {cpu.get('cores')} cores; " +
                     ", ".join(f"{k} {'yes' if v else 'no'}" for k, v in flags.items()))
        if flags.get("avx512_bf16") or flags.get("amx_bf16"):
            lines.append("  this CPU has bf16 instructions (darkformer's CPU kernels do not use them yet)")
    gpu = s.get("gpu", {})
    lines.append(f"GPU: {gpu.get('name')}" if gpu.get("gpu") else "GPU: none (no GPU: nothing to check)")
    lines.append("stages: " + " | ".join(f"{st['stage']} {st['status']}" + (f" {st['seconds']:.0f}s" if st.get(
        "seconds") else "") for st in stages))
    for st in stages:
        if st["status"] == "failed" and st.get("detail"):
            lines.append(f"  {st['stage']}: {st['detail'][:300]}")
    for name, t in tests.items():
        passed = (t["tests"] or 0) - (t["failures"] or 0) - t["skipped"]
        line = f"  {name}: {passed}/{t['tests']} passed, {t['skipped']} skipped"
        if t["failed"]:
            line += "; failed: " + ", ".join(t["failed"][:8])
        lines.append(line)
    q = s.get("quickstart")
    if q:
        lines.append(f"quickstart {q['steps']} steps: cpu loss {q['cpu_final_loss']:.4f} ({q['cpu_tokens_per_s']:.0f} tok/s)" +
                     "".join(f"; {n} {q[n]['final_loss']:.4f}, mean rel diff {100 * q[n]['mean_rel_diff_last_100']:.2f}% "
                             f"(tol {100 * q[n]['tolerance']:.0f}%), {q[n]['tokens_per_s']:.0f} tok/s"
                             for n in ("cuda-f32", "cuda-bf16") if n in q))
    d = s.get("determinism")
    if d:
        lines.append("determinism: " + "; ".join(f"{k}: {'same bits' if v['identical'] else 'DIFFERS from step ' + str(v['first_differing_step'])} over {v['steps']} steps"
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
        lines.append("cuda graph (bf16 quickstart): " +
                     ("same bits as eager" if v["identical"] else f"DIFFERS from step {v['first_differing_step']}") +
                     "".join(f"; {k} {r:.0f} tok/s" for k, r in rates.items()))
    mp = s.get("mpi")
    if mp:
        lines.append("mpi 2 ranks vs 1 process (CPU): " + ("same bits" if mp.get("pass") else "DIFFERENT") +
                     f" over {next((v['steps'] for v in mp.values() if isinstance(v, dict)), 0)} steps")
    bench = s.get("bench")
    if bench:
        for name, r in bench["train"].items():
            extra = f", peak {r.get('alloc_peak_mb') or r.get('peak_mem_mib') or 0:.0f} MiB"
            if r.get("phases_ms"):
                extra += ", phases " + " ".join(f"{k} {v:.1f}" for k, v in r["phases_ms"].items()) + " ms"
            lines.append(f"train {name}: {r['tokens_per_s']:.0f} tok/s, MFU {100 * r['mfu']:.1f}%{extra}")
            prof = r.get("profile")
            if prof:  # bench_train --profile: where the step's device time goes
                lines.append(f"  kernels {prof['kernels_ms_per_step']:.1f} ms of a {prof['median_step_ms']:.1f} ms step; top: " +
                             ", ".join(f"{p['phase']}/{p['kernel']} {p['ms_per_step']:.1f}{rate(p)}" for p in prof["rows"][:10]))
        lines += fmt_attention(bench["attention"])
        if bench.get("sm90_over_mma_sync"):
            lines.append("flash, Hopper kernels over mma.sync ones (time ratio): " +
                         ", ".join(f"{k} {v:.2f}x" for k, v in bench["sm90_over_mma_sync"].items()))
        targets = bench.get("targets") or []
        if targets:
            met = [t for t in targets if t["met"]]
            lines.append(f"attention targets met: {len(met)} of {len(targets)}")
            lines += [f"  {'MISSED' if t['met'] is False else 'n/a'}: {t['target']} ({t['detail']})"
                      for t in targets if not t["met"]]
    failed = [st["stage"] for st in stages if st["status"] == "failed"]
    lines.append("failed stages: " + (", ".join(failed) if failed else "none"))
    text = "\n".join(lines)
    if len(text) > LIMIT:
        text = text[:LIMIT - 60] + "\n... (cut at %d characters; all of it is in summary.json)" % LIMIT
    print(text)
    return 0


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
