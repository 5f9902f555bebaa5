#!/usr/bin/env python3
"""Writes the tensor_chunk fuzzer's seed inputs to fuzz/corpus/tensor_chunk/ (run from anywhere):
a 24-byte local-link frame head, then records of a 2-byte little-endian length and a serialized
tandem.v1.TensorChunk, encoded from text format by protoc --encode."""
import os
import struct
import subprocess

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "fuzz", "corpus", "tensor_chunk")


def chunk(text):
    return subprocess.run(
        ["protoc", "-I", ROOT, "--encode=tandem.v1.TensorChunk", "proto/tandem/v1/peer.proto"],
        input=text.encode(), capture_output=True, check=True, cwd=ROOT).stdout


def head(kind, meta, data):  # FrameHead: magic, type, meta_bytes, reserved, data_bytes
    return struct.pack("<IIIIQ", 0x4B4C4454, kind, meta, 0, data)


def record(message):
    return struct.pack("<H", len(message)) + message


TAG = 'tag { job_id: "job-1" kind: TRANSFER_KIND_EMBEDDINGS step: 3 micro_batch: 1 ' \
      'sample_begin: 0 sample_end: 2 source_rank: 0 }'
seeds = {
    # one chunk: a float32 [2, 2] tensor whole
    "whole": head(2, 40, 16) + record(chunk(
        TAG + ' dtype: DTYPE_FLOAT32 shape: [2, 2] total_bytes: 16 offset: 0 data: "'
        + "\\000" * 16 + '"')),
    # two chunks of a bfloat16 [2, 4] tensor
    "two_chunks": head(2, 40, 8) + record(chunk(
        TAG + ' dtype: DTYPE_BFLOAT16 shape: [2, 4] total_bytes: 16 offset: 0 data: "'
        + "\\001" * 8 + '"')) + record(chunk(TAG + ' offset: 8 data: "' + "\\002" * 8 + '"')),
    # a gradient-squares transfer of another job
    "other_job": head(3, 0, 0) + record(chunk(
        'tag { job_id: "job-2" kind: TRANSFER_KIND_GRAD_SQUARES step: 1 sample_end: 1 } '
        'dtype: DTYPE_FLOAT64 shape: [1] total_bytes: 8 data: "12345678"')),
    # a chunk past the end of its tensor
    "overrun": head(1, 8, 0) + record(chunk(
        TAG + ' dtype: DTYPE_FLOAT16 shape: [3] total_bytes: 6 offset: 4 data: "abcd"')),
}
os.makedirs(OUT, exist_ok=True)
for name, data in seeds.items():
    with open(os.path.join(OUT, name), "wb") as f:
        f.write(data)
print(f"wrote {len(seeds)} seeds to {OUT}")
