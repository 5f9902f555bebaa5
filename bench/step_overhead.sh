#!/usr/bin/env bash
# Per-step time of the disaggregated `tandem run` at 1x1 (a coordinator and two actor processes,
# embeddings and gradients over gRPC on loopback) against `tandem run --colocated` (both models in one
# process), on the same job and thread count, measured in this one command. Prints one table.
#
#   bench/step_overhead.sh [JOB.json] [STEPS] [THREADS]    (defaults: examples/shapes_vlm.json, 300, 1)
#
# The step time is the median of metrics.jsonl's per-step wall time over the steps after the first 20
# (warm-up), so evaluation, checkpoints and process start-up are not counted.
set -euo pipefail
cd "$(dirname "$0")/.."
job="${1:-examples/shapes_vlm.json}"
steps="${2:-300}"
threads="${3:-1}"
tandem="${TANDEM_BINARY:-build/tandem}"
work="$(mktemp -d /tmp/tandem-step-overhead-XXXXXX)"
trap 'rm -rf "$work"' EXIT

# The job at 1x1 with `steps` steps and no evaluation or checkpoint before the end.
sed -E -e 's/"actors": *[0-9]+/"actors": 1/g' -e "s/\"steps\": *[0-9]+/\"steps\": $steps/" \
    -e 's/"eval_every": *[0-9]+/"eval_every": 0/' -e 's/"checkpoint_every": *[0-9]+/"checkpoint_every": 0/' \
    "$job" > "$work/job.json"
cp -r "$(dirname "$job")"/jsonl "$work/" 2>/dev/null || true

median_step_ms() {  # metrics.jsonl -> median of successive elapsed_s differences, in ms, after step 20
  grep -v '"eval"' "$1" | sed -E 's/.*"elapsed_s":([0-9.eE+-]+).*/\1/' |
    awk 'NR > 1 { d[n++] = ($1 - prev) * 1000 } { prev = $1 }
         END { m = 0; for (i = 20; i < n; i++) v[m++] = d[i]; asort(v); print v[int(m / 2) + 1] }'
}

"$tandem" --log-level warning run "$work/job.json" --colocated --threads "$threads" --run-dir "$work/colocated" \
  --output json > /dev/null
"$tandem" --log-level warning run "$work/job.json" --threads "$threads" --run-dir "$work/service" \
  --output json > /dev/null
colocated=$(median_step_ms "$work/colocated/metrics.jsonl")
service=$(median_step_ms "$work/service/metrics.jsonl")
printf '| run | median step (ms) | ratio |\n| --- | --- | --- |\n'
printf '| --colocated | %.2f | 1.00 |\n' "$colocated"
printf '| tandem run, 1x1 actors | %.2f | %.2f |\n' "$service" "$(awk -v a="$service" -v b="$colocated" 'BEGIN { print a / b }')"
echo "job $job, $steps steps, $threads thread(s) per process, $(nproc) cores"
