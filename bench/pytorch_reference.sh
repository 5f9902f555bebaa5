#!/usr/bin/env bash
# The job trained three ways on this machine, one after the other, and one table: plain PyTorch in
# one process (bench/pytorch_reference.py), `tandem run --colocated` and `tandem run` (the job's
# vision + llm actors as processes on 127.0.0.1).
#
#   bench/pytorch_reference.sh [JOB.json] [--steps N] [--keep DIR] [--sdpa default|math]
#   (defaults: examples/shapes_vlm.json, the job's schedule.steps, math)
#
# tandem-dataset-dump first writes the job's samples as Tandem's sampler draws them, its resolved
# configs and its initial weights (bench/dataset_dump.cc), and the resolved job with schedule.steps
# set to N; all three runs train that job.json, so they see the same samples in the same order and
# evaluate at the same steps on the same held-out samples. Tandem's numbers are read from its run
# directories (metrics.jsonl, summary.json), PyTorch's from the run directory the script writes in
# the same layout. Threads: PyTorch torch.set_num_threads(cores); --colocated its default (all
# cores); tandem run its default (cores / actors per actor process, at least 1). --sdpa picks
# PyTorch's attention kernel: `math` (the default here) or PyTorch's own choice, its CPU flash
# kernel, which is slower at these sizes.
#
# Binaries come from $TANDEM_BUILD_DIR (default build/): tandem (or $TANDEM_BINARY) and
# bench/tandem-dataset-dump. Python from $PYTHON (default .venv/bin/python, which needs torch and
# numpy). --keep DIR keeps the run directories (and the dump) in DIR.
set -euo pipefail
cd "$(dirname "$0")/.."
job=examples/shapes_vlm.json
steps=""
keep=""
sdpa=math
while [ $# -gt 0 ]; do
  case "$1" in
    --steps) steps="$2"; shift 2 ;;
    --keep) keep="$2"; shift 2 ;;
    --sdpa) sdpa="$2"; shift 2 ;;
    -h|--help) sed -n '2,21p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) job="$1"; shift ;;
  esac
done
build="${TANDEM_BUILD_DIR:-build}"
tandem="${TANDEM_BINARY:-$build/tandem}"
dump="$build/bench/tandem-dataset-dump"
python="${PYTHON:-.venv/bin/python}"
for f in "$tandem" "$dump" "$python"; do
  [ -x "$f" ] || { echo "pytorch_reference.sh: $f is missing (scripts/build; scripts/venv)" >&2; exit 1; }
done
if [ -n "$keep" ]; then
  mkdir -p "$keep"
  [ -z "$(ls -A "$keep")" ] || { echo "pytorch_reference.sh: $keep is not empty" >&2; exit 1; }
  work="$(cd "$keep" && pwd)"
else
  work="$(mktemp -d /tmp/tandem-pytorch-reference-XXXXXX)"
  trap 'rm -rf "$work"' EXIT
fi

load_before="$(cut -d' ' -f1-3 /proc/loadavg)"
"$dump" "$job" --out "$work/data" ${steps:+--steps "$steps"}
echo "plain PyTorch ..." >&2
"$python" bench/pytorch_reference.py train "$work/data" --run-dir "$work/pytorch" --threads "$(nproc)" --sdpa "$sdpa"
echo "tandem run --colocated ..." >&2
"$tandem" --log-level warning run "$work/data/job.json" --colocated --run-dir "$work/colocated" \
  --output json > /dev/null
echo "tandem run ..." >&2
"$tandem" --log-level warning run "$work/data/job.json" --run-dir "$work/run" --output json > /dev/null
for run in colocated run; do
  cmp -s "$work/data/job.json" "$work/$run/job.json" ||
    { echo "pytorch_reference.sh: $run trained another job than the dump's" >&2; exit 1; }
done

echo
"$python" bench/pytorch_reference.py report "$work/data" "$work/pytorch" "$work/colocated" "$work/run" \
  --load "$load_before / $(cut -d' ' -f1-3 /proc/loadavg)"
