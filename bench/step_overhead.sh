#!/usr/bin/env bash
# Per-step time of the disaggregated `tandem run` at 1x1 (a coordinator and two actor processes,
# embeddings and gradients over a local link, a Unix socket) against `tandem run --colocated` (both
# models in one process), on the same job and thread count, measured in this one command; beside them
# `tandem run --no-local-links` (the same transfers over gRPC on loopback). Prints one table.
#
#   bench/step_overhead.sh [JOB.json] [STEPS] [THREADS] [ROUNDS]
#   (defaults: examples/shapes_vlm.json, 300, 1, 3)
#
# The three runs alternate ROUNDS times, so a slow spell of the machine touches both. A run's step times
# are metrics.jsonl's successive elapsed_s differences after the first 20 steps (warm-up), so
# evaluation, checkpoints and process start-up are not counted; the table gives the median over all
# rounds.
set -euo pipefail
cd "$(dirname "$0")/.."
job="${1:-examples/shapes_vlm.json}"
steps="${2:-300}"
threads="${3:-1}"
rounds="${4:-3}"
tandem="${TANDEM_BINARY:-build/tandem}"
work="$(mktemp -d /tmp/tandem-step-overhead-XXXXXX)"
trap 'rm -rf "$work"' EXIT

# The job at 1x1 with `steps` steps and no evaluation or checkpoint before the end.
sed -E -e 's/"actors": *[0-9]+/"actors": 1/g' -e "s/\"steps\": *[0-9]+/\"steps\": $steps/" \
    -e 's/"eval_every": *[0-9]+/"eval_every": 0/' -e 's/"checkpoint_every": *[0-9]+/"checkpoint_every": 0/' \
    "$job" > "$work/job.json"
cp -r "$(dirname "$job")"/jsonl "$work/" 2>/dev/null || true

source bench/step_times.sh  # step_ms, median

for round in $(seq "$rounds"); do
  "$tandem" --log-level warning run "$work/job.json" --colocated --threads "$threads" \
    --run-dir "$work/colocated-$round" --output json > /dev/null
  "$tandem" --log-level warning run "$work/job.json" --threads "$threads" --run-dir "$work/service-$round" \
    --output json > /dev/null
  "$tandem" --log-level warning run "$work/job.json" --threads "$threads" --run-dir "$work/grpc-$round" \
    --no-local-links --output json > /dev/null
  step_ms "$work/colocated-$round/metrics.jsonl" >> "$work/colocated.ms"
  step_ms "$work/service-$round/metrics.jsonl" >> "$work/service.ms"
  step_ms "$work/grpc-$round/metrics.jsonl" >> "$work/grpc.ms"
done
colocated=$(median < "$work/colocated.ms")
row() {  # label, median
  printf '| %s | %.2f | %.2f |\n' "$1" "$2" "$(awk -v a="$2" -v b="$colocated" 'BEGIN { print a / b }')"
}
printf '| run | median step (ms) | ratio |\n| --- | --- | --- |\n'
row "--colocated" "$colocated"
row "tandem run, 1x1 actors" "$(median < "$work/service.ms")"
row "tandem run --no-local-links, 1x1 actors" "$(median < "$work/grpc.ms")"
echo "job $job, $steps steps x $rounds rounds, $threads thread(s) per process, $(nproc) cores"
