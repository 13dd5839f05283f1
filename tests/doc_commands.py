#!/usr/bin/env python3
"""Runs every shell block of README.md and docs/*.md, as a user would type it (CTest: docs_commands).

A block is a fenced block whose info string is sh, bash, shell or console (console: only its
"$ " lines run). Each block runs with `bash -euo pipefail -x` (the trace names the failing
line), the blocks of one file in order in one scratch folder, so a block may use what an
earlier block of its page made (prepare-data, then train, then eval). A block that exits
non-zero, or runs past --timeout, fails the suite; the report names the file, the block's line
and the tail of its output.

Markers, in the markdown:
  # not run in CI: REASON          as a block's first line (visible on the rendered page): the
                                   block is skipped and listed with REASON. Only for what cannot
                                   run on CI's 2-core CPU machine: a GPU, several hosts, a large
                                   download, a build or CTest run of its own (CI's set-up is
                                   that), or a placeholder to fill in.
  <!-- doc-check setup: COMMAND -->  on the line(s) just before the fence (not rendered): COMMAND
                                   runs first, in the same shell, to make a prerequisite the
                                   prose names but the page does not create (e.g. runs/small).

The scratch folder: a copy of the source tree (not .git, build*, cache, runs, hf), so nothing a
command writes (runs/, hf/, cache/data/, a rewritten docs/config.md) lands in the source tree;
cache/ is one folder shared by all pages (prepared data is made once) whose models/ links to
the source's cache/models (CI fetches the models before the tests); build/ holds links to every
entry of the build folder, except build/darkformer, a wrapper that runs the real program with
the shortening overrides below. The doc text stays what a user types.

Shortening overrides (the wrapper; a value already given smaller is kept, a missing one added):
  train, sweep, prepare-data:  --set for each key of SET_CAPS (training.steps 2, or 4 with
                               --resume so that it continues; warm-up 1, one eval batch, ...)
                               and DATA_SET (the Python tutorial's 17 files instead of the
                               corpus, a 1024-token vocabulary: see there; not with --full-data)
  probe:    --batches 1 --redraws 2 --calibration-batches 1
  generate: --max-tokens 8
  passkey:  --depths 2 --trials 1;  copy: --trials 1
  demo-mlp: --steps 50
Environment of every block: OMPI_ALLOW_RUN_AS_ROOT(_CONFIRM)=1 and Open MPI's oversubscribe
(CI runs as root on 2 cores; the docs' mpirun lines name neither).

Usage: doc_commands.py --source REPO --darkformer BUILD/darkformer [--docs FILE...] [--timeout S]
                       [--keep] [--full-data] [--expect-fail FILE:LINE --expect-text TEXT]
--expect-fail: succeed only when that block (and no other) fails with TEXT in its output (the
check that a misspelt flag in a doc example fails the suite).
Python standard library only.
"""
import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

SHELL_LANGS = {"sh", "bash", "shell", "console"}
SKIP_RE = re.compile(r"^# not run in CI: (.+)$")
SETUP_RE = re.compile(r"^<!-- doc-check setup: (.+) -->$")
FENCE_RE = re.compile(r"^(```+)\s*([\w+-]*)")

# Config keys capped for train, sweep and prepare-data (sweep's --set reaches every point).
SET_CAPS = {
    "training.steps": 2,
    "data.seq_len": 128,  # sizes: what a probe or eval of the run then measures too
    "training.batch_size": 2,
    "schedule.warmup_steps": 1,  # at most training.steps
    "training.eval_batches": 1,
    "training.generate_tokens": 4,
    "data.val_windows": 4,  # what `eval --checkpoint` of the run evaluates
    "data.vocab_size": 1024,  # a SentencePiece tokenizer trained here (GGUF ones are the model's)
    "finetune.transfer.steps": 2,
    "finetune.transfer.eval_batches": 1,
    "attention.calibration_batches": 1,
    "stability.redraw_eval_batches": 1,
}
RESUME_STEPS = 4  # train --resume: 2 more steps than the first run's 2
# Flags capped per command (flags may not repeat: a given one is rewritten, a missing one added).
FLAG_CAPS = {
    "probe": {"--batches": 1, "--redraws": 2, "--calibration-batches": 1},
    "generate": {"--max-tokens": 8},
    "demo-mlp": {"--steps": 50},
    "passkey": {"--depths": 2, "--trials": 1},
    "copy": {"--trials": 1},
}
# Data, set (not capped) for every run: the Python tutorial (17 files, 290 KB; debdocs-python's
# library docs are 12 MB, debdocs 44 MB) instead of the configs' corpus, so that preparing it
# (a tokenizer trained, the files tokenized for each GGUF model) takes seconds; a quarter of
# the files for validation. --full-data leaves the configs' corpus.
DATA_SET = {
    "data.sources": '["/usr/share/doc/python3.11/html/_sources/tutorial"]',
    "data.val_fraction": "0.25",
}


# Capped only where the run sets them (on its command line or in its config file): added to
# any other run they would turn on what it does not do (a transfer needs finetune.init_from).
ONLY_WHERE_SET = {"finetune.transfer.steps", "finetune.transfer.eval_batches"}


def config_sets(args, key):
    """Whether the --config file among a command's args sets the dotted key."""
    if "--config" not in args[:-1]:
        return False
    try:
        with open(args[args.index("--config") + 1], encoding="utf-8") as f:
            node = json.load(f)
    except (OSError, ValueError):
        return False  # the program itself reports a config it cannot read
    for part in key.split("."):
        if not isinstance(node, dict) or part not in node:
            return False
        node = node[part]
    return True


def cap_value(given, cap):
    """The smaller of a given number and the cap; a value that is no number stays."""
    try:
        return str(cap) if float(given) > float(cap) else given
    except ValueError:
        return given


def wrapped_args(args):
    """The real program's arguments for a doc command's `build/darkformer ARGS`."""
    if not args:
        return args
    command, rest = args[0], list(args[1:])
    if command in ("train", "sweep", "prepare-data"):
        full = os.environ.get("DOC_COMMANDS_FULL_DATA") == "1"  # --full-data
        caps, data = dict(SET_CAPS), {} if full else DATA_SET
        if full:
            del caps["data.vocab_size"]  # the configs' tokenizers, as configured
        if "--resume" in rest:
            caps["training.steps"] = RESUME_STEPS
        for i in range(len(rest) - 1):  # warm-up stays within a smaller given training.steps
            if rest[i] == "--set" and rest[i + 1].startswith("training.steps="):
                given = cap_value(rest[i + 1].split("=", 1)[1], caps["training.steps"])
                caps["schedule.warmup_steps"] = cap_value(given, caps["schedule.warmup_steps"])
        seen = set()
        for i in range(len(rest) - 1):
            if rest[i] == "--set" and "=" in rest[i + 1]:
                key, value = rest[i + 1].split("=", 1)
                seen.add(key)
                if key in caps:
                    rest[i + 1] = key + "=" + cap_value(value, caps[key])
                elif key in data:
                    rest[i + 1] = key + "=" + data[key]
        for key, value in list(caps.items()) + list(data.items()):
            if key not in seen and (key not in ONLY_WHERE_SET or config_sets(rest, key)):
                rest += ["--set", "%s=%s" % (key, value)]
    for flag, cap in FLAG_CAPS.get(command, {}).items():
        if flag in rest[:-1]:
            i = rest.index(flag)
            rest[i + 1] = cap_value(rest[i + 1], cap)
        else:
            rest += [flag, str(cap)]
    return [command] + rest


def parse_blocks(path, shown):
    """The shell blocks of a markdown file: dicts with file, line, text, skip, setup."""
    with open(path, encoding="utf-8") as f:
        lines = f.read().split("\n")
    blocks, i = [], 0
    while i < len(lines):
        m = FENCE_RE.match(lines[i])
        if not m:
            i += 1
            continue
        fence, lang, start = m.group(1), m.group(2).lower(), i
        i += 1
        body = []
        while i < len(lines) and not lines[i].startswith(fence):
            body.append(lines[i])
            i += 1
        i += 1  # the closing fence
        if lang not in SHELL_LANGS:
            continue
        if lang == "console":
            body = [l[2:] for l in body if l.startswith("$ ")]
        setup, j = [], start - 1
        while j >= 0 and SETUP_RE.match(lines[j]):
            setup.insert(0, SETUP_RE.match(lines[j]).group(1))
            j -= 1
        first = next((l for l in body if l.strip()), "")
        skip = SKIP_RE.match(first)
        blocks.append({"file": shown, "line": start + 1, "text": "\n".join(body), "setup": setup,
                       "skip": skip.group(1) if skip else None})
    return blocks


def make_scratch(root, name, source, build, cache):
    """A copy of the source tree with build/ (links + the wrapper) and cache/ (shared)."""
    work = os.path.join(root, name)
    skip_top = {".git", "cache", "runs", "hf"}
    shutil.copytree(source, work, symlinks=True,
                    ignore=lambda d, names: [n for n in names if os.path.samefile(d, source) and
                                             (n in skip_top or n.startswith("build"))] +
                    [n for n in names if n == "__pycache__"])
    os.symlink(cache, os.path.join(work, "cache"))
    wrapped = os.path.join(work, "build")
    os.mkdir(wrapped)
    for entry in os.listdir(build):
        if entry != "darkformer":
            os.symlink(os.path.join(build, entry), os.path.join(wrapped, entry))
    shim = os.path.join(wrapped, "darkformer")
    with open(shim, "w") as f:
        f.write('#!/bin/sh\nexec "%s" "%s" --wrap "%s" "$@"\n' %
                (sys.executable, os.path.abspath(__file__), os.path.join(build, "darkformer")))
    os.chmod(shim, 0o755)
    return work


def run_block(block, work, timeout, log_path):
    """Runs a block (its setup first); returns (exit code, seconds, output)."""
    script = "\n".join(block["setup"] + [block["text"]]) + "\n"
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               OMPI_MCA_rmaps_base_oversubscribe="1", PS4="+ ")
    start = time.monotonic()
    with open(log_path, "w") as log:
        proc = subprocess.Popen(["bash", "-euxo", "pipefail", "-c", script], cwd=work, env=env,
                                stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            code = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, 9)  # the block's whole process group (mpirun, sweep children)
            proc.wait()
            code = "timeout after %d s" % timeout
    with open(log_path, errors="replace") as log:
        return code, time.monotonic() - start, log.read()


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--source", required=True, help="the repository")
    p.add_argument("--darkformer", required=True, help="the program; its folder is the docs' build/")
    p.add_argument("--docs", nargs="*", help="markdown files (default: README.md docs/*.md)")
    p.add_argument("--timeout", type=int, default=600, help="seconds per block")
    p.add_argument("--keep", action="store_true", help="keep the scratch folder")
    p.add_argument("--full-data", action="store_true", help="train on the configs' own corpus")
    p.add_argument("--expect-fail", help="FILE:LINE of the one block that must fail")
    p.add_argument("--expect-text", default="", help="text the failing block's output holds")
    a = p.parse_args()
    source, build = os.path.abspath(a.source), os.path.dirname(os.path.abspath(a.darkformer))
    if not os.access(os.path.join(build, "darkformer"), os.X_OK):
        sys.exit("doc_commands: no program %s/darkformer" % build)
    docs = a.docs or ["README.md"] + sorted(os.path.join("docs", f) for f in
                                            os.listdir(os.path.join(source, "docs")) if f.endswith(".md"))
    root = tempfile.mkdtemp(prefix="doc-commands-")
    cache = os.path.join(root, "cache")
    os.mkdir(cache)
    if os.path.isdir(os.path.join(source, "cache", "models")):
        os.symlink(os.path.join(source, "cache", "models"), os.path.join(cache, "models"))
    if a.full_data:  # read by the wrapper processes
        os.environ["DOC_COMMANDS_FULL_DATA"] = "1"
    results, outputs, t0 = [], {}, time.monotonic()
    print("doc_commands: scratch %s, build %s" % (root, build), flush=True)
    for n, doc in enumerate(docs):
        path = doc if os.path.isabs(doc) else os.path.join(source, doc)
        shown = os.path.relpath(path, source)
        blocks = parse_blocks(path, shown)
        if not blocks:
            continue
        work = make_scratch(root, "%02d-%s" % (n, os.path.basename(doc)[:-3]), source, build, cache)
        for b in blocks:
            where = "%s:%d" % (b["file"], b["line"])
            if b["skip"]:
                results.append((where, "skipped", 0.0, b["skip"]))
                print("[skip] %s: not run in CI: %s" % (where, b["skip"]), flush=True)
                continue
            log = os.path.join(root, where.replace("/", "_").replace(":", "_") + ".log")
            code, seconds, output = run_block(b, work, a.timeout, log)
            ok = code == 0
            results.append((where, "ok" if ok else "FAILED", seconds, "" if ok else "exit %s" % code))
            print("[%s] %s (%.1f s)" % ("ok" if ok else "FAILED", where, seconds), flush=True)
            if not ok:
                lines = output.rstrip("\n").split("\n")
                # The error lines wherever they are (a run prints its whole config after one),
                # then the tail.
                errors = [l for l in lines[:-40] if "error" in l.lower() or l.startswith("Traceback")]
                tail = "\n".join(errors[-10:] + (["..."] if errors else []) + lines[-40:])
                print("---- %s: the block failed (exit %s); its commands:\n%s\n---- the last lines of its "
                      "output (+ lines are the commands as bash ran them):\n%s\n----" %
                      (where, code, b["text"], tail), flush=True)
                outputs[where] = output
        if not a.keep:  # the page's runs (a Gemma 3 checkpoint is 1 GB) go once it is done
            shutil.rmtree(work, ignore_errors=True)
    total = time.monotonic() - t0
    width = max([len(r[0]) for r in results] + [5])
    print("\n%-*s %-8s %8s  %s" % (width, "block", "result", "seconds", "note"))
    for where, status, seconds, note in results:
        print("%-*s %-8s %8.1f  %s" % (width, where, status, seconds, note))
    counts = {s: sum(1 for r in results if r[1] == s) for s in ("ok", "FAILED", "skipped")}
    print("%d blocks: %d ok, %d failed, %d skipped (marked); %.1f s in all" %
          (len(results), counts["ok"], counts["FAILED"], counts["skipped"], total))
    if not a.keep:
        shutil.rmtree(root, ignore_errors=True)
    if a.expect_fail:  # the misspelt-flag check: exactly this block fails, saying why
        failed = [r[0] for r in results if r[1] == "FAILED"]
        caught = (len(failed) == 1 and failed[0].endswith(a.expect_fail) and
                  a.expect_text in outputs[failed[0]])
        print("doc_commands: expected %s to fail with '%s' in its output: %s" %
              (a.expect_fail, a.expect_text, "it did" if caught else "it did NOT"))
        return 0 if caught else 1
    return 1 if counts["FAILED"] else 0

if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[1] == "--wrap":
        real, args = sys.argv[2], wrapped_args(sys.argv[3:])
        print("doc_commands: running darkformer %s" % " ".join(args), file=sys.stderr, flush=True)
        os.execv(real, [real] + args)
    sys.exit(main())
