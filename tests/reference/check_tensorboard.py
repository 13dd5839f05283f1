#!/usr/bin/env python3
"""Reads a run folder's TensorBoard event files with the tensorboard package's own
EventAccumulator (orphaned steps of a restart purged) and checks that its scalars are exactly
metrics.jsonl's numbers: every number of every line at the line's step, tagged with its key
(nested keys joined by "/", true/false as 1/0), as float32, each (tag, step) once, with
transfer.json's numbers at step 0 (tagged transfer/...) and stability.json's spikes and
divergence; and that the config (and, with --sample, the sample) are there as text.

With --server TENSORBOARD it also starts the viewer users open (`tensorboard --logdir RUN`,
which reads through its Rust data server, tensorboard-data-server, with its own rules for a
restart) and checks the same numbers through its HTTP API, as the browser gets them.

usage: check_tensorboard.py RUN_DIR [--sample] [--server PATH_TO_TENSORBOARD]
"""
import json
import os
import socket
import struct
import subprocess
import sys
import time
import urllib.parse
import urllib.request

from tensorboard.backend.event_processing.event_accumulator import EventAccumulator


def flatten(tag, value, out):
    if isinstance(value, bool):
        out.append((tag, 1.0 if value else 0.0))
    elif isinstance(value, (int, float)):
        out.append((tag, float(value)))
    elif isinstance(value, dict):
        for k, v in value.items():
            flatten(f"{tag}/{k}" if tag else k, v, out)
    elif isinstance(value, list):
        for i, v in enumerate(value):
            flatten(f"{tag}/{i}", v, out)


def as_float32(x):
    return struct.unpack("<f", struct.pack("<f", x))[0]


def expected_scalars(run):
    """{tag: [(step, float32 value)]} as the run's files say."""
    expected = {}
    with open(os.path.join(run, "metrics.jsonl")) as f:
        for line in f:
            if not line.strip():
                continue
            record = json.loads(line)
            pairs = []
            for key, value in record.items():
                if key != "step":
                    flatten(key, value, pairs)
            for tag, value in pairs:
                expected.setdefault(tag, []).append((record["step"], as_float32(value)))
    # What the run adds from its other files: transfer.json at step 0, stability.json's spikes
    # and divergence at their steps.
    transfer = os.path.join(run, "transfer.json")
    if os.path.exists(transfer):
        pairs = []
        flatten("transfer", json.load(open(transfer)), pairs)
        for tag, value in pairs:
            expected.setdefault(tag, []).append((0, as_float32(value)))
    stability = os.path.join(run, "stability.json")
    if os.path.exists(stability):
        report = json.load(open(stability))
        for key, tag in (("loss_spikes", "stability/loss_spike_height"), ("grad_spikes", "stability/grad_spike_height")):
            for spike in report[key]:
                if spike["height"] is not None:
                    expected.setdefault(tag, []).append((spike["step"], as_float32(spike["height"])))
        if report["diverged"]:
            expected.setdefault("stability/diverged", []).append((report["divergence_step"], 1.0))
    return expected


def compare(expected, got, label):
    """Prints each tag whose points differ; returns the number of differences."""
    print(f"  {label}: {len(got)} scalar tags, {sum(len(v) for v in got.values())} points")
    failures = 0
    for tag in sorted(set(expected) | set(got)):
        e, g = sorted(expected.get(tag, [])), sorted(got.get(tag, []))
        if e != g:
            failures += 1
            print(f"  {label}: {tag}: metrics.jsonl has {len(e)} points, TensorBoard {len(g)}; first difference:",
                  next(((a, b) for a, b in zip(e, g) if a != b), (e[len(g):len(g) + 1], g[len(e):len(e) + 1])))
        elif len({s for s, _ in g}) != len(g):
            failures += 1
            print(f"  {label}: {tag}: a step appears twice")
    return failures


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get_json(port, path, **query):
    url = f"http://127.0.0.1:{port}{path}" + ("?" + urllib.parse.urlencode(query) if query else "")
    with urllib.request.urlopen(url, timeout=30) as response:
        return json.load(response)


def server_scalars(run, tensorboard, expected_tags):
    """{tag: [(step, float32 value)]} through a `tensorboard --logdir RUN` server's HTTP API, once its
    data server has loaded every tag (it loads in the background: polled up to 120 s)."""
    for attempt in range(3):  # a port taken between free_port() and the server's bind: another
        port = free_port()
        log_path = os.path.join(os.path.dirname(os.path.abspath(run)), f"tensorboard-server-{attempt}.log")
        log = open(log_path, "w")
        server = subprocess.Popen([tensorboard, "--logdir", run, "--host", "127.0.0.1", "--port", str(port),
                                   "--load_fast", "true", "--reload_interval", "1"],
                                  stdout=log, stderr=subprocess.STDOUT)
        try:
            tags, deadline = {}, time.time() + 120
            while time.time() < deadline and server.poll() is None:
                try:
                    runs = get_json(port, "/data/plugin/scalars/tags")
                    tags = runs.get(".", {})
                    if expected_tags <= set(tags):
                        time.sleep(2)  # one more reload: every file read to its end
                        break
                except OSError:
                    pass
                time.sleep(0.5)
            if server.poll() is not None:
                continue
            got = {}
            for tag in get_json(port, "/data/plugin/scalars/tags").get(".", {}):
                points = get_json(port, "/data/plugin/scalars/scalars", run=".", tag=tag)
                got[tag] = [(step, as_float32(value)) for _, step, value in points]
            return got
        finally:
            server.terminate()
            server.wait(timeout=30)
            log.close()
    raise RuntimeError(f"tensorboard did not start 3 times (its output: {log_path})")


def main():
    run = sys.argv[1]
    expected = expected_scalars(run)
    acc = EventAccumulator(run, size_guidance={"scalars": 0, "tensors": 0})
    acc.Reload()
    tags = acc.Tags()
    got = {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in tags["scalars"]}
    files = sorted(n for n in os.listdir(run) if n.startswith("events.out.tfevents."))
    print(f"{run}: {len(files)} event file(s) {files}; text: {sorted(tags['tensors'])}")
    print("  tags:", ", ".join(sorted(got)))
    failures = compare(expected, got, "EventAccumulator")
    for text in ["config"] + (["sample"] if "--sample" in sys.argv else []):
        if text not in tags["tensors"]:
            failures += 1
            print(f"  no text '{text}'")
    if "--server" in sys.argv:
        tensorboard = sys.argv[sys.argv.index("--server") + 1]
        failures += compare(expected, server_scalars(run, tensorboard, set(expected)), "tensorboard server (HTTP)")
    print("OK" if failures == 0 else f"FAILED: {failures} difference(s)")
    return 0 if failures == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
