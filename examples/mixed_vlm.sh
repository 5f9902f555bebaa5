#!/usr/bin/env bash
# The mixed example (examples/mixed_vlm.json): writes LLaVA-format conversation files about shapes
# images into runs/mixed-data/ (tandem-make-mixed-example: text-only questions; one image of 32 x 32,
# 32 x 64 or 64 x 32 pixels, read as LLaVA-NeXT tiles; two images), trains Tandem's own tower and
# LLM on them from scratch with 2 vision + 2 LLM actors, packed rows balanced every step, then asks
# the result about held-out images. Everything lands in runs/mixed/.
# Usage: examples/mixed_vlm.sh [tandem run flags, e.g. --colocated]
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/build >&2
data=runs/mixed-data
[ -f "$data/eval.json" ] || build/data/tandem-make-mixed-example --out "$data"
rm -rf runs/mixed
build/tandem run examples/mixed_vlm.json --run-dir runs/mixed "$@"
# A prompt in the word tokenizer's "tandem" format: (user words) <bos> (answer) <eos> (user words);
# the tokenizer adds the last <bos>, after which the model answers.
ask() {
  local prompt=$1
  shift
  printf '%s\n  -> ' "${prompt//$'\n'/ }"
  build/tandem generate --model runs/mixed --prompt "$prompt" "$@"
}
images=$data/images
ask "What number comes after three?"                                   # four
ask "<image>
Describe the shape." --image "$images/eval_1.png"                      # held out: a small green cross
ask "<image>
Describe the shape.<bos>a small green cross<eos>Where is the shape?" \
  --image "$images/eval_1.png"                                         # held out: bottom left
ask "<image>
Describe the shape.<bos>a large red square<eos>Where is the shape?" \
  --image "$images/eval_0.png"                                         # held out: bottom (32 x 64: 3 tiles)
ask "<image>
<image>
Describe the first image.<bos>a small green square at the top right<eos>What colour is the shape in the second image?" \
  --image "$images/eval_4.png" --image "$images/eval_5.png"            # held out: blue
