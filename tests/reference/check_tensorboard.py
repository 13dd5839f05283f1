#!/usr/bin/env python3
"""Reads a run folder's TensorBoard event files with the tensorboard package's own
EventAccumulator (as `tensorboard --logdir` does, orphaned steps of a restart purged) and checks
that its scalars are exactly metrics.jsonl's numbers: every number of every line at the line's
step, tagged with its key (nested keys joined by "/", true/false as 1/0), as float32, each
(tag, step) once, with transfer.json's numbers at step 0 (tagged transfer/...) and
stability.json's spikes and divergence; and that the config (and, with --sample, the sample) are there as text.

usage: check_tensorboard.py RUN_DIR [--sample]
"""
import json
import os
import struct
import sys

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


def main():
    run = sys.argv[1]
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
    acc = EventAccumulator(run, size_guidance={"scalars": 0, "tensors": 0})
    acc.Reload()
    tags = acc.Tags()
    got = {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in tags["scalars"]}
    files = sorted(n for n in os.listdir(run) if n.startswith("events.out.tfevents."))
    print(f"{run}: {len(files)} event file(s) {files}; {len(got)} scalar tags, "
          f"{sum(len(v) for v in got.values())} points; text: {sorted(tags['tensors'])}")
    print("  tags:", ", ".join(sorted(got)))
    failures = 0
    for tag in sorted(set(expected) | set(got)):
        if sorted(expected.get(tag, [])) != sorted(got.get(tag, [])):
            failures += 1
            e, g = sorted(expected.get(tag, [])), sorted(got.get(tag, []))
            print(f"  {tag}: metrics.jsonl has {len(e)} points, TensorBoard {len(g)}; first difference:",
                  next(((a, b) for a, b in zip(e, g) if a != b), (e[len(g):len(g) + 1], g[len(e):len(e) + 1])))
        elif len({s for s, _ in got[tag]}) != len(got[tag]):
            failures += 1
            print(f"  {tag}: a step appears twice")
    for text in ["config"] + (["sample"] if "--sample" in sys.argv else []):
        if text not in tags["tensors"]:
            failures += 1
            print(f"  no text '{text}'")
    print("OK" if failures == 0 else f"FAILED: {failures} difference(s)")
    return 0 if failures == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
