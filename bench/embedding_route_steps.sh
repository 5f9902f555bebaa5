#!/usr/bin/env bash
# Per-step time of `tandem run` with llm.parallel.embeddings "each_rank" against "broadcast" on the
# same tensor-parallel job, measured in this one command (docs/parallelism.md). Prints one table.
#
#   bench/embedding_route_steps.sh [JOB.json] [STEPS] [ROUNDS]
#   (defaults: examples/shapes_vlm_parallel.json, 300, 3)
#
# JOB must set llm.parallel.tensor. The two runs alternate ROUNDS times, so a slow spell of the
# machine touches both; evaluation and checkpoints move to the end. A run's step times are
# metrics.jsonl's successive elapsed_s differences after the first 20 steps; the table gives the
# median over all rounds.
set -euo pipefail
cd "$(dirname "$0")/.."
job="${1:-examples/shapes_vlm_parallel.json}"
steps="${2:-300}"
rounds="${3:-3}"
tandem="${TANDEM_BINARY:-build/tandem}"
work="$(mktemp -d /tmp/tandem-embedding-route-XXXXXX)"
trap 'rm -rf "$work"' EXIT
grep -q '"tensor"' "$job" || { echo "$job sets no llm.parallel.tensor" >&2; exit 2; }

for route in each_rank broadcast; do
  sed -E -e "s/\"steps\": *[0-9]+/\"steps\": $steps/" -e 's/"eval_every": *[0-9]+/"eval_every": 0/' \
      -e 's/"checkpoint_every": *[0-9]+/"checkpoint_every": 0/' \
      -e 's/, *"embeddings": *"[a-z_]*"//' -e "s/\"tensor\": *([0-9]+)/\"tensor\": \\1, \"embeddings\": \"$route\"/" "$job" > "$work/$route.json"
done
cp -r "$(dirname "$job")"/jsonl "$work/" 2>/dev/null || true

source bench/step_times.sh  # step_ms, median

for round in $(seq "$rounds"); do
  for route in each_rank broadcast; do
    "$tandem" --log-level warning run "$work/$route.json" --threads 1 --run-dir "$work/$route-$round" \
      --output json > /dev/null
    step_ms "$work/$route-$round/metrics.jsonl" >> "$work/$route.ms"
  done
done
each=$(median < "$work/each_rank.ms")
broadcast=$(median < "$work/broadcast.ms")
printf '| llm.parallel.embeddings | median step (ms) | ratio |\n| --- | --- | --- |\n'
printf '| each_rank | %.2f | 1.00 |\n' "$each"
printf '| broadcast | %.2f | %.2f |\n' "$broadcast" "$(awk -v a="$broadcast" -v b="$each" 'BEGIN { print a / b }')"
echo "job $job, $steps steps x $rounds rounds, 1 thread per process, $(nproc) cores"
