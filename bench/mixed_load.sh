#!/usr/bin/env bash
# Training on heterogeneous load (bench/mixed_load.py: text-only, one-image and several-image samples,
# images of any size read as LLaVA-NeXT tiles, texts of 12 to 512 tokens) at 2x2, 1x3 and 3x1 vision x
# LLM actors, each four ways in this one command:
#   padded    every sample a row padded to the longest possible, contiguous blocks (schedule.balance
#             false, no packing): the baseline
#   balanced  samples over the LLM ranks by cost, tiles over the vision ranks by count
#   packed-N  balanced, and the LLM rows packed to data.pack_tokens N positions: 1024 holds the
#             longest sample (4 images' 352 and 640 text tokens), 2048 twice as many
# For each run: the median step time after STEPS/4 warm-up steps and the samples/s it makes, the mean
# per-step imbalance of each group (slowest rank's compute over the mean, and in brackets the
# busiest rank's planned work over the mean) and the mean padding waste (metrics.jsonl), and the
# throughput ratio against the padded run of the same layout.
#
#   bench/mixed_load.sh [STEPS] [SAMPLES]     (defaults: 24, 480)
#
# Needs .venv/ with torch, transformers and Pillow (scripts/venv) for the data and the random-weight
# checkpoint, and build/tandem.
set -euo pipefail
cd "$(dirname "$0")/.."
steps="${1:-24}"
samples="${2:-480}"
tandem="${TANDEM_BINARY:-build/tandem}"
work="$(mktemp -d /tmp/tandem-mixed-load-XXXXXX)"
trap 'rm -rf "$work"' EXIT

mix=$(.venv/bin/python bench/mixed_load.py --out "$work/data" --samples "$samples" | tail -n 1)
read -r batches epoch_gap < <(.venv/bin/python -c \
  'import json, sys; m = json.loads(sys.argv[1]); print(m["batches"], m["gap"])' "$mix")

spec() {  # vision actors, llm actors, balance, pack_tokens
  cat <<EOF
{"name": "mixed-load",
 "data": {"conversations": {"train": "$work/data/train.json"}, "max_text_tokens": 640,
          "max_images_per_sample": 4, "pack_tokens": $4},
 "pretrained": "$work/data/model",
 "vision": {"actors": $1, "engine": {"optimizer": {"type": "AdamW", "params": {"lr": 1e-4}}}},
 "llm": {"actors": $2, "engine": {"optimizer": {"type": "AdamW", "params": {"lr": 1e-4}}}},
 "schedule": {"global_batch": 12, "micro_batches": 1, "steps": $steps, "eval_every": 0,
              "checkpoint_every": 0, "seed": 1, "balance": $3}}
EOF
}

# metrics.jsonl -> "median_step_ms vision_imbalance llm_imbalance padding_waste spread
# vision_planned llm_planned", after the warm-up.
summarise() {
  .venv/bin/python - "$1" "$((steps / 4))" <<'EOF'
import json, statistics, sys
records = [json.loads(line) for line in open(sys.argv[1]) if line.strip()]
steps = [r for r in records if "elapsed_s" in r and "eval" not in r]
warm = int(sys.argv[2])
times = [(b["elapsed_s"] - a["elapsed_s"]) * 1000 for a, b in zip(steps[warm:], steps[warm + 1:])]
mean = lambda key: statistics.mean(r.get(key, 0) for r in steps[warm + 1:])
# A padded run's rows have one length, so a step's work is proportional to 1 - its padding waste.
work = [1 - r.get("padding_waste", 0) for r in steps]
print(f"{statistics.median(times):.1f} {mean('vision_imbalance'):.3f} {mean('llm_imbalance'):.3f} "
      f"{mean('padding_waste'):.3f} {max(work) / max(min(work), 1e-9):.2f} "
      f"{mean('vision_planned_imbalance'):.3f} {mean('llm_planned_imbalance'):.3f}")
EOF
}

printf '| vision x LLM | run | median step (ms) | samples/s | vision imbalance (planned) | LLM imbalance (planned) | padding waste | throughput vs padded |\n'
printf '| --- | --- | --- | --- | --- | --- | --- | --- |\n'
gap=0
for layout in "2 2" "1 3" "3 1"; do
  read -r nv nl <<< "$layout"
  padded_ms=""
  for mode in padded balanced packed-1024 packed-2048; do
    case "$mode" in
      padded) balance=false pack=0 ;;
      balanced) balance=true pack=0 ;;
      packed-*) balance=true pack="${mode#packed-}" ;;
    esac
    spec "$nv" "$nl" "$balance" "$pack" > "$work/job.json"
    run_dir="$work/run-$nv-$nl-$mode"
    "$tandem" --log-level warning run "$work/job.json" --threads 1 --run-dir "$run_dir" --output json \
      > /dev/null
    read -r ms vision llm waste spread vision_plan llm_plan < <(summarise "$run_dir/metrics.jsonl")
    [ "$mode" = padded ] && gap="$spread"
    [ -z "$padded_ms" ] && padded_ms="$ms"
    printf '| %sx%s | %s | %s | %.1f | %s (%s) | %s (%s) | %s | %.2f |\n' "$nv" "$nl" "$mode" "$ms" \
      "$(awk -v ms="$ms" 'BEGIN { print 12000 / ms }')" "$vision" "$vision_plan" "$llm" "$llm_plan" "$waste" \
      "$(awk -v a="$padded_ms" -v b="$ms" 'BEGIN { print a / b }')"
  done
done
echo "global batch 12, $steps steps a run ($((steps / 4)) warm-up), $samples samples, one thread per actor," \
  "$(nproc) cores; the epoch's $batches batches of 12 vary ${epoch_gap}x in positions (the heaviest over" \
  "the lightest); the last padded run's steps drew ${gap}x"
