#!/usr/bin/env python3
"""Reference values for tests/test_gguf.cpp, written to tests/reference/gguf_quants.json.

For every GGUF tensor type that data/gguf.cpp dequantises, a few random but valid blocks of
raw bytes (seeded numpy RNG; f16 scales finite and moderate) and their dequantisation by
llama.cpp's own Python package (`pip install gguf`, gguf.quants.dequantize). Expected values
are float32 bit patterns so the C++ test can compare bit for bit (NaN and inf included).

When the SmolLM2 model file exists (cache/models/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf
under the repo root) it also records gguf-py's dequantised values of two of its tensors at a
few random positions; without it those samples are simply left out.

Regenerate:  python3 tests/reference/make_gguf_reference.py
"""
import base64
import json
import os

import numpy as np
from gguf import GGMLQuantizationType as QT
from gguf import quants
from gguf.constants import GGML_QUANT_SIZES

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
MODEL = os.path.join(REPO, "cache/models/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf")
OUT = os.path.join(HERE, "gguf_quants.json")

# Byte offsets of the f16 scale fields inside one block of each block-quantised type.
F16_FIELDS = {
    QT.Q4_0: [0], QT.Q4_1: [0, 2], QT.Q5_0: [0], QT.Q5_1: [0, 2], QT.Q8_0: [0],
    QT.Q2_K: [80, 82], QT.Q3_K: [108], QT.Q4_K: [0, 2], QT.Q5_K: [0, 2], QT.Q6_K: [208],
}
BLOCKS = 3


def bits(values):
    return [int(b) for b in np.asarray(values, dtype=np.float32).reshape(-1).view(np.uint32)]


def quant_case(rng, qtype):
    """BLOCKS random blocks of a block-quantised type with moderate f16 scales."""
    _, type_bytes = GGML_QUANT_SIZES[qtype]
    raw = rng.integers(0, 256, size=(BLOCKS, type_bytes), dtype=np.uint8)
    for off in F16_FIELDS[qtype]:
        scale = rng.uniform(-2.0, 2.0, size=BLOCKS).astype(np.float16)
        raw[:, off:off + 2] = scale.view(np.uint8).reshape(BLOCKS, 2)
    return raw.reshape(-1)


def float_case(rng, qtype):
    """Plain float types: random values plus the special ones (zeros, subnormal, inf, NaN)."""
    values = rng.normal(0.0, 3.0, size=61).astype(np.float32)
    if qtype == QT.F32:
        return values.view(np.uint8)
    if qtype == QT.F16:
        h = values.astype(np.float16).view(np.uint16)
        special = np.array([0x0000, 0x8000, 0x0001, 0x03FF, 0x8200, 0x0400, 0x7BFF, 0xFBFF,
                            0x7C00, 0xFC00, 0x7E00, 0x3C00, 0x3555], dtype=np.uint16)
        return np.concatenate([h, special]).view(np.uint8)
    # BF16: the top halves of float32 bit patterns.
    b = (values.view(np.uint32) >> 16).astype(np.uint16)
    special = np.array([0x0000, 0x8000, 0x0001, 0x7F80, 0xFF80, 0x7FC0, 0x3F80], dtype=np.uint16)
    return np.concatenate([b, special]).view(np.uint8)


def quant_cases():
    rng = np.random.default_rng(20240611)
    cases = []
    for qtype in [QT.F32, QT.F16, QT.BF16]:
        raw = float_case(rng, qtype)
        cases.append((qtype, raw))
    for qtype in F16_FIELDS:
        cases.append((qtype, quant_case(rng, qtype)))
    out = []
    for qtype, raw in cases:
        block_size, type_bytes = GGML_QUANT_SIZES[qtype]
        count = raw.size // type_bytes * block_size
        expected = quants.dequantize(raw, qtype).reshape(-1)
        assert expected.size == count, (qtype.name, expected.size, count)
        out.append({
            "type": qtype.name,
            "type_id": int(qtype),
            "count": int(count),
            "raw_base64": base64.b64encode(raw.tobytes()).decode("ascii"),
            "expected_bits": bits(expected),
        })
    return out


def model_samples():
    """gguf-py's values of two tensors of the real model at a few seeded positions."""
    if not os.path.exists(MODEL):
        print(f"note: {MODEL} absent; model samples left out")
        return None
    from gguf import GGUFReader

    reader = GGUFReader(MODEL)
    rng = np.random.default_rng(7)
    samples = []
    for t in reader.tensors:
        if t.name not in ("token_embd.weight", "blk.0.attn_q.weight"):
            continue
        values = quants.dequantize(t.data, t.tensor_type)
        ne0, ne1 = int(t.shape[0]), int(t.shape[1])
        values = values.reshape(ne1, ne0)
        rows = np.concatenate([[0, ne1 - 1], rng.integers(0, ne1, size=10)])
        cols = np.concatenate([[0, ne0 - 1], rng.integers(0, ne0, size=10)])
        samples.append({
            "name": t.name,
            "type": t.tensor_type.name,
            "dims": [ne0, ne1],
            "positions": [[int(r), int(c)] for r, c in zip(rows, cols)],
            "expected_bits": bits([values[r, c] for r, c in zip(rows, cols)]),
        })
    return {"file": os.path.relpath(MODEL, REPO), "tensors": samples}


def main():
    doc = {
        "generator": "tests/reference/make_gguf_reference.py",
        "gguf_py_version": _gguf_version(),
        "quants": quant_cases(),
    }
    model = model_samples()
    if model is not None:
        doc["model"] = model
    with open(OUT, "w") as f:
        json.dump(doc, f, separators=(",", ":"))
        f.write("\n")
    print(f"wrote {OUT} ({os.path.getsize(OUT)} bytes)")


def _gguf_version():
    try:
        from importlib.metadata import version
        return version("gguf")
    except Exception:  # noqa: BLE001 - the version is informational only
        return "unknown"


if __name__ == "__main__":
    main()
