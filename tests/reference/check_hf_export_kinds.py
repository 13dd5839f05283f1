#!/usr/bin/env python3
"""Checks a `darkformer export-hf` folder of a model with random-feature attention against our
own forward pass: transformers must load it with AutoModelForCausalLM and
trust_remote_code=True as DarkformerForCausalLM (modeling_darkformer.py from the folder), and
its float32 logits on a seeded sequence must equal those of tests/tools/hf_logits (darkformer
on the checkpoint) within --tolerance (absolute, every position and vocabulary entry; with
--relative R, within the larger of that and R times the largest |logit|: float32 itself is
coarser than 1e-4 on Gemma 3's logits, which reach 150, where transformers' own Gemma3ForCausalLM
in float32 is 2.7e-4 from float64). Also
checks that a left-padded batch gives the unpadded sequence's logits at the real positions.
The text-level checks (tokenizer ids, greedy generation) are check_hf_tokenizer.py's.

usage: check_hf_export_kinds.py EXPORT_DIR --logits HF_LOGITS --checkpoint RUN [--length N] [--tolerance X]
                                [--relative R]
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

import numpy as np
import torch
from transformers import AutoModelForCausalLM


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("export_dir")
    ap.add_argument("--logits", required=True, help="tests/tools/hf_logits")
    ap.add_argument("--checkpoint", required=True)
    ap.add_argument("--length", type=int, default=40)
    ap.add_argument("--tolerance", type=float, default=1e-4)
    ap.add_argument("--relative", type=float, default=0.0)
    args = ap.parse_args()

    config = json.load(open(os.path.join(args.export_dir, "config.json")))
    layers = ", ".join(
        spec["kind"] + ("" if spec["kind"] == "softmax" else
                        f" ({spec.get('mode', 'linear')}, m {spec['num_features']}, window {spec['exact_window']}, "
                        f"epoch {spec['feature_epoch']}{', proposal' if spec.get('log_weight') else ''})")
        for spec in config["attention_layers"])
    model = AutoModelForCausalLM.from_pretrained(args.export_dir, trust_remote_code=True,
                                                 dtype=torch.float32).eval()
    name = type(model).__name__
    print(f"{args.export_dir}: {name}, family {config['family']}; layers: {layers}")
    if name != "DarkformerForCausalLM":
        print(f"FAILED: loaded as {name}")
        return 1
    ids = torch.randint(0, config["vocab_size"], (args.length,), generator=torch.Generator().manual_seed(7))
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "logits.f32")
        subprocess.run([args.logits, args.checkpoint, ",".join(str(i) for i in ids.tolist()), out], check=True,
                       capture_output=True)
        ours = torch.from_numpy(np.fromfile(out, dtype="<f4").reshape(args.length, -1).copy())
    with torch.no_grad():
        theirs = model(ids[None]).logits[0].float()
        # The same sequence after 3 pads on the left, masked: positions count real tokens only.
        pad = config.get("pad_token_id") or 0
        padded = torch.cat([torch.full((3,), pad), ids])[None]
        mask = torch.cat([torch.zeros(3, dtype=torch.long), torch.ones(args.length, dtype=torch.long)])[None]
        left = model(padded, attention_mask=mask).logits[0, 3:].float()
    diff = (ours - theirs).abs().max().item()
    pad_diff = (left - theirs).abs().max().item()
    scale = ours.abs().max().item()
    tolerance = max(args.tolerance, args.relative * scale)
    ok = diff <= tolerance and pad_diff <= tolerance
    print(f"  logits ({args.length} x {ours.shape[1]}, largest |logit| {scale:.2f}): max |ours - transformers| "
          f"{diff:.2e}; left-padded batch vs unpadded {pad_diff:.2e} (tolerance {tolerance:.2g}): "
          f"{'OK' if ok else 'FAILED'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
