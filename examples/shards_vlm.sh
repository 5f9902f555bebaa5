#!/usr/bin/env bash
# The shards example (examples/shards_vlm.json): `tandem data pack` writes examples/jsonl's
# captions as WebDataset tar shards with an index (runs/shards-data/train/, .../eval/), and
# `tandem run` trains on the shards, each rank reading the images it encodes from them. Everything
# lands in runs/shards/.
# Usage: examples/shards_vlm.sh [tandem run flags, e.g. --colocated]
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/build >&2
data=runs/shards-data
rm -rf "$data" runs/shards
# Small shards, so that even twelve samples make several: a real set takes the default 512MB.
build/tandem data pack examples/jsonl/train.jsonl "$data/train" --shard-size 16KiB
build/tandem data pack examples/jsonl/eval.jsonl "$data/eval" --shard-size 16KiB
build/tandem run examples/shards_vlm.json --run-dir runs/shards "$@"
