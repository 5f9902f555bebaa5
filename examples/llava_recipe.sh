#!/usr/bin/env bash
# LLaVA's two-stage recipe on the shapes data, from checkpoints in Hugging Face format:
#   0. train Tandem's own towers on the captions (examples/shapes_vlm.json) and export them;
#   1. a new projector on the captions, both towers frozen (examples/llava_stage1.json);
#   2. the projector and the LLM on conversations about the images (examples/llava_stage2.json);
# then ask the result about an image it has never seen. Everything lands in runs/llava/.
# Usage: examples/llava_recipe.sh [--skip-stage0]   (reuse runs/llava/stage0-hf)
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/build >&2
tandem=build/tandem
out=runs/llava
if [ "${1:-}" != --skip-stage0 ]; then
  rm -rf "$out"
  "$tandem" run examples/shapes_vlm.json --run-dir "$out/stage0"
  "$tandem" export "$out/stage0" "$out/stage0-hf" --format hf
fi
rm -rf "$out/stage1" "$out/stage1-hf" "$out/stage2" "$out/stage2-hf"
"$tandem" run examples/llava_stage1.json --run-dir "$out/stage1"
"$tandem" export "$out/stage1" "$out/stage1-hf" --format hf
"$tandem" run examples/llava_stage2.json --run-dir "$out/stage2"
"$tandem" export "$out/stage2" "$out/stage2-hf" --format hf
for question in "What colour is the shape?" "Where is the shape?" "What shape is it?" "Is the shape small or large?" "Describe the image."; do
  echo "$question"
  "$tandem" generate --model "$out/stage2-hf" --image examples/jsonl/images/shape_08.png \
    --prompt "<image>
$question" --chat
done
