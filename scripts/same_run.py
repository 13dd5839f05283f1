#!/usr/bin/env python3
"""Whether two runs of the same config are the same bits: for a refactoring that must change
nothing (train the quickstart before and after into two folders, then compare them).

    scripts/same_run.py [--ignore KEY]... RUN_A RUN_B

Compares metrics.jsonl line by line without its timing fields (elapsed_s, step_ms,
tokens_per_s), the SHA-256 of every checkpoint's files, sample.txt and stability.json, and
the last checkpoint's state.json apart from the run's own folder. Prints one line per item;
exit code 0 when all are identical, 1 otherwise, 2 on bad arguments.

--ignore KEY (repeatable) leaves out one more thing that may differ: a metrics.jsonl field
(comm_wait_ms, peak_mem_mib), or a dotted key of the last checkpoint's state.json (world_size)
or of its config (training.grad_accum, distributed), for runs that must train the same bits in different ways (scripts/slurm-check.sh:
2 ranks against one process with twice the gradient accumulation).
"""
import hashlib
import json
import pathlib
import sys

TIMINGS = ("elapsed_s", "step_ms", "tokens_per_s")


def metrics(run, ignored):
    rows = []
    with open(run / "metrics.jsonl") as f:
        for line in f:
            row = json.loads(line)
            for key in TIMINGS + tuple(ignored):
                row.pop(key, None)
            rows.append(row)
    return rows


def digest(path):
    return hashlib.sha256(path.read_bytes()).hexdigest() if path.exists() else "(missing)"


def state_without_dirs(path, ignored):
    state = json.loads(path.read_text())
    state.pop("data_dir", None)
    state.get("config", {}).get("output", {}).pop("dir", None)
    for key in ignored:
        *parents, last = key.split(".")
        for node in (state, state.get("config", {})):  # state.json's own keys, then its config's
            for parent in parents:
                node = node.get(parent, {}) if isinstance(node, dict) else {}
            if isinstance(node, dict):
                node.pop(last, None)
    return state


def main(argv):
    ignored, runs = [], []
    args = iter(argv)
    for arg in args:
        if arg == "--ignore":
            ignored.append(next(args, ""))
        else:
            runs.append(arg)
    if len(runs) != 2 or "" in ignored:
        print(__doc__, file=sys.stderr)
        return 2
    a, b = map(pathlib.Path, runs)
    same = True
    ma, mb = metrics(a, ignored), metrics(b, ignored)
    print(f"metrics.jsonl: {len(ma)} and {len(mb)} lines, " +
          ("identical without timings" if ma == mb else "DIFFERENT"))
    same &= ma == mb
    files = sorted({p.relative_to(a) for p in (a / "checkpoints").glob("*/*")} |
                   {p.relative_to(b) for p in (b / "checkpoints").glob("*/*")})
    files = [f for f in files if f.name != "state.json"] + [pathlib.Path("sample.txt"), pathlib.Path("stability.json")]
    for rel in files:
        da, db = digest(a / rel), digest(b / rel)
        print(f"{rel}: {da[:16]} " + ("identical" if da == db else f"DIFFERENT ({db[:16]})"))
        same &= da == db
    checkpoints = sorted((a / "checkpoints").glob("*/state.json"))
    if checkpoints:
        rel = checkpoints[-1].relative_to(a)
        equal = (b / rel).exists() and state_without_dirs(a / rel, ignored) == state_without_dirs(b / rel, ignored)
        print(f"{rel} (run folders aside): " + ("identical" if equal else "DIFFERENT"))
        same &= equal
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
