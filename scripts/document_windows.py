#!/usr/bin/env python3
"""Document windows of a prepared data folder, counted from its token shards.

For each split: the documents' length distribution (as prepare-data prints it) and, per
sequence length, how many windows of seq_len + 1 tokens data.windows "document" cuts (within
each document at stride seq_len, a tail shorter than a window giving none) and what share of
the split's tokens they cover; "packed" for comparison. A second implementation of
data/documents.h and data/windows.h, written from the shard layout of data/shard.h, for the
numbers in docs/long-context.md.

Usage: scripts/document_windows.py DIR [--seq-len N ...]
       e.g. scripts/document_windows.py cache/data/longdocs-sentencepiece-8192 --seq-len 1024 4096
Python standard library only.
"""
import argparse
import array
import math
import os
import struct
import sys

HEADER_BYTES = 256
THRESHOLDS = (1024, 4096, 8192)


def document_lengths(path):
    """Lengths of the documents of a shard: the spans ending with its last token's id."""
    with open(path, "rb") as f:
        data = f.read()
    if data[:8] != b"DRKTOKS\0":
        sys.exit(f"{path}: not a darkformer token shard")
    token_bytes, count, documents = struct.unpack_from("<IQQ", data, 12)
    tokens = array.array("H" if token_bytes == 2 else "I")
    tokens.frombytes(data[HEADER_BYTES:HEADER_BYTES + count * token_bytes])
    if sys.byteorder != "little":
        tokens.byteswap()
    if count == 0:
        return []
    end, lengths, start = tokens[-1], [], 0
    for i, t in enumerate(tokens):
        if t == end:
            lengths.append(i + 1 - start)
            start = i + 1
    if len(lengths) < documents:
        sys.exit(f"{path}: {documents} documents in the header, {len(lengths)} end tokens")
    return lengths


def percentile(sorted_lengths, p):
    return sorted_lengths[max(1, math.ceil(p * len(sorted_lengths))) - 1] if sorted_lengths else 0


def windows(length, seq_len):
    return (length - 1) // seq_len if length > seq_len else 0


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dir")
    parser.add_argument("--seq-len", type=int, nargs="+", default=[1024, 2048, 4096, 8192])
    args = parser.parse_args()
    for split in ("train", "val"):
        lengths = document_lengths(os.path.join(args.dir, f"{split}.bin"))
        s, total = sorted(lengths), sum(lengths)
        reach = ", ".join(
            f">= {t // 1024}K: {sum(1 for x in s if x >= t)} ({100 * sum(x for x in s if x >= t) / max(total, 1):.0f}%)"
            for t in THRESHOLDS)
        print(f"{split}: {len(s)} documents, {total} tokens; p50 {percentile(s, 0.5)}, p90 {percentile(s, 0.9)}, "
              f"max {s[-1] if s else 0}; {reach}")
        for seq_len in args.seq_len:
            n = sum(windows(x, seq_len) for x in lengths)
            covered = sum(windows(x, seq_len) * seq_len + 1 for x in lengths if windows(x, seq_len) > 0)
            packed = windows(total, seq_len)
            print(f"  seq_len {seq_len}: {n} document windows covering {100 * covered / max(total, 1):.1f}% of the "
                  f"tokens (packed: {packed})")


if __name__ == "__main__":
    main()
