#!/usr/bin/env bash
# The data loader against PyTorch's: images a second read from the same WebDataset shards (decode,
# resize and crop as CLIPImageProcessor does, to 224 x 224) by tandem-loader-bench (data.workers
# threads, data::MakeImagesBatch) and by a DataLoader with as many worker processes and Pillow
# (bench/loader_pytorch.py), for each worker count, in this one command. The data: IMAGES JPEGs
# of 640 x 480 (quality 90), packed by `tandem data pack` into shards of 64 MB.
#
#   bench/loader.sh [IMAGES] [WORKERS...]     (defaults: 1000, 1 2)
#
# Needs .venv/ with torch, numpy and Pillow (scripts/venv) and build/ (scripts/build).
set -euo pipefail
cd "$(dirname "$0")/.."
images="${1:-1000}"
shift || true
workers=("$@")
[ ${#workers[@]} -gt 0 ] || workers=(1 2)
work="$(mktemp -d /tmp/tandem-loader-XXXXXX)"
trap 'rm -rf "$work"' EXIT

.venv/bin/python - "$work" "$images" <<'PY'
import json, os, sys
import numpy as np
from PIL import Image
work, count = sys.argv[1], int(sys.argv[2])
os.makedirs(f"{work}/images")
rng = np.random.default_rng(0)
y, x = np.mgrid[0:480, 0:640]
with open(f"{work}/captions.jsonl", "w") as out:
    for i in range(count):
        # Smooth shapes and some noise: a photo's JPEG size (about 60-90 KB), not a flat colour's.
        base = np.stack([np.sin((x * (c + 1) + y * (i % 7 + 1)) / 60.0 + i) for c in range(3)], -1)
        pixels = ((base + 1) * 110 + rng.normal(0, 12, base.shape)).clip(0, 255).astype(np.uint8)
        Image.fromarray(pixels).save(f"{work}/images/{i:05d}.jpg", quality=90)
        out.write(json.dumps({"image": f"images/{i:05d}.jpg", "text": f"picture {i}"}) + "\n")
os.makedirs(f"{work}/model")
with open(f"{work}/model/preprocessor_config.json", "w") as f:
    json.dump({"image_processor_type": "CLIPImageProcessor", "do_resize": True,
               "size": {"shortest_edge": 224}, "resample": 3, "do_center_crop": True,
               "crop_size": {"height": 224, "width": 224}, "do_rescale": True,
               "rescale_factor": 1 / 255, "do_normalize": True,
               "image_mean": [0.48145466, 0.4578275, 0.40821073],
               "image_std": [0.26862954, 0.26130258, 0.27577711]}, f)
PY
build/tandem data pack "$work/captions.jsonl" "$work/shards" --shard-size 64MB >/dev/null
echo "$images JPEGs of 640 x 480 in $(ls "$work"/shards/*.tar | wc -l) shards ($(du -sh "$work/shards" | cut -f1))"
printf '%-8s %8s %10s %14s\n' workers tandem pytorch "tandem/pytorch"
for n in "${workers[@]}"; do
  t=$(build/bench/tandem-loader-bench --shards "$work/shards" --model "$work/model" --workers "$n")
  p=$(.venv/bin/python bench/loader_pytorch.py --shards "$work/shards" --workers "$n")
  .venv/bin/python - "$n" "$t" "$p" <<'PY'
import json, sys
n, t, p = sys.argv[1], json.loads(sys.argv[2]), json.loads(sys.argv[3])
print(f"{n:<8} {t['images_per_s']:>8.1f} {p['images_per_s']:>10.1f} {t['images_per_s'] / p['images_per_s']:>13.2f}x"
      f"   (images/s; peak memory {t['peak_rss_mib']:.0f} MiB against {p['peak_rss_mib']:.0f} MiB)")
PY
done
