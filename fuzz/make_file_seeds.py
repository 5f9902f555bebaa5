"""Writes the seed corpora of the file-format fuzzers into fuzz/corpus/: small PNGs and JPEGs of
every layout the decoders take, safetensors files (as the safetensors package writes them, and
with Tandem's checksum entry), jsonl and conversation files naming the fuzzers' "a.png", tar
shards, and HTTP requests. Deterministic; run from the repository root with the project's virtual environment:

    .venv/bin/python fuzz/make_file_seeds.py
"""
import io
import json
import pathlib
import struct
import tarfile
import zlib

import numpy as np
from PIL import Image

root = pathlib.Path("fuzz/corpus")


def write(target, name, data):
    path = root / target / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data if isinstance(data, bytes) else data.encode())


rng = np.random.default_rng(0)
pixels = rng.integers(0, 256, size=(6, 5, 4), dtype=np.uint8)

# PNG: grey, grey+alpha, RGB, RGBA, palette, 16-bit grey, interlaced.
for mode in ["L", "LA", "RGB", "RGBA", "P"]:
    image = Image.fromarray(pixels[..., :3]).convert(mode)
    out = io.BytesIO()
    image.save(out, format="PNG")
    write("png", f"{mode.lower()}.png", out.getvalue())
out = io.BytesIO()
Image.fromarray(pixels[..., 0].astype(np.uint16) * 257).save(out, format="PNG")
write("png", "grey16.png", out.getvalue())
out = io.BytesIO()
Image.fromarray(pixels[..., :3]).save(out, format="PNG", interlace=1)
write("png", "interlaced.png", out.getvalue())

# JPEG: baseline colour, greyscale, progressive, 4:4:4.
for name, kwargs, mode in [("baseline.jpg", {}, "RGB"), ("grey.jpg", {}, "L"),
                           ("progressive.jpg", {"progressive": True}, "RGB"),
                           ("444.jpg", {"subsampling": 0}, "RGB")]:
    out = io.BytesIO()
    Image.fromarray(pixels[..., :3]).convert(mode).save(out, format="JPEG", quality=90, **kwargs)
    write("jpeg", name, out.getvalue())


def safetensors(tensors, metadata=None, checksum=False):
    header, data = {}, b""
    crcs = {}
    for name, (dtype, shape, raw) in tensors.items():
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
        crcs[name] = f"{zlib.crc32(raw):08x}"
    meta = dict(metadata or {})
    if checksum:
        meta["tandem.crc32"] = json.dumps(crcs, separators=(",", ":"))
    if meta:
        header = {"__metadata__": meta, **header}
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    return struct.pack("<Q", len(text)) + text + data


floats = struct.pack("<6f", *range(6))
write("safetensors_header", "one.safetensors", safetensors({"w": ("F32", [2, 3], floats)}))
write("safetensors_header", "checksummed.safetensors",
      safetensors({"a": ("F32", [2, 3], floats), "b": ("I64", [], struct.pack("<q", 7)),
                   "e": ("BF16", [0], b""), "c": ("U8", [3], b"xyz")}, {"format": "pt"}, checksum=True))
write("safetensors_header", "empty.safetensors", safetensors({}))

# Data files beside the fuzzers' a.png.
write("jsonl", "train.jsonl", '{"image": "a.png", "text": "a small red circle"}\n'
                              '{"image": "a.png", "text": "a big blue square at the top"}\n')
write("jsonl", "crlf.jsonl", '{"image": "a.png", "text": "x"}\r\n\r\n{"text": "y", "image": "a.png"}\r\n')
conversation = [{"image": "a.png", "conversations": [
    {"from": "human", "value": "<image>\nWhat is it?"}, {"from": "gpt", "value": "A circle."},
    {"from": "human", "value": "Which colour?"}, {"from": "gpt", "value": "Red."}]}]
write("conversations", "list.json", json.dumps(conversation))
write("conversations", "lines.jsonl", "\n".join(json.dumps(c) for c in conversation * 2) + "\n")
write("conversations", "system.json", json.dumps([{"image": "a.png", "conversations": [
    {"from": "system", "value": "Be brief."}, {"from": "human", "value": "<image>"},
    {"from": "gpt", "value": "A square."}]}]))

# Tar shards (WebDataset's layout): a caption with one PNG, a conversation with two, a ShareGPT
# text-only sample, and a pax header (a long key).
def tar(members, fmt=tarfile.USTAR_FORMAT):
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=fmt) as archive:
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    return out.getvalue()


small = io.BytesIO()
Image.fromarray(pixels[..., :3]).save(small, format="PNG")
png = small.getvalue()
two_images = {"conversations": [{"from": "human", "value": "<image><image>Same?"},
                                {"from": "gpt", "value": "No."}]}
text_only = {"messages": [{"role": "user", "content": "Hi?"}, {"role": "assistant", "content": "Hello."}]}
write("tar_shard", "shard.tar", tar([
    ("000000.json", b'{"caption": "a small red circle"}'), ("000000.png", png),
    ("000001.json", json.dumps(two_images).encode()), ("000001.0.png", png), ("000001.1.png", png),
    ("000002.json", json.dumps(text_only).encode())]))
write("tar_shard", "pax.tar", tar([("k" * 120 + ".json", b'{"caption": "x"}'), ("k" * 120 + ".png", png)],
                                  tarfile.PAX_FORMAT))

# Shard indexes, as `tandem data pack` writes them.
write("shard_index", "index.json", json.dumps({
    "format": "tandem-shards/1", "pattern": "train-{000000..000001}.tar", "samples": 5, "images": 4,
    "shards": [{"file": "train-000000.tar", "samples": 3, "bytes": 10240, "crc32": "1a2b3c4d"},
               {"file": "train-000001.tar", "samples": 2, "bytes": 6144, "crc32": "00000007"}],
    "word_counts": {"a": 5, "circle": 2, "red": 3}}, indent=1))
write("shard_index", "no_words.json", json.dumps({
    "format": "tandem-shards/1", "pattern": "train-000000.tar", "samples": 1, "images": 1,
    "shards": [{"file": "train-000000.tar", "samples": 1, "bytes": 3072, "crc32": "ffffffff"}]}))

# HTTP requests.
write("metrics_http", "get_metrics", "GET /metrics HTTP/1.1\r\nHost: coordinator:9090\r\nAccept: */*\r\n\r\n")
write("metrics_http", "get_healthz_query", "GET /healthz?verbose=1 HTTP/1.0\r\n\r\n")
write("metrics_http", "post", "POST /metrics HTTP/1.1\r\nContent-Length: 3\r\n\r\nabc")
write("metrics_http", "not_found", "GET /debug HTTP/1.1\r\n\r\n")
