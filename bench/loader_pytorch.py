"""PyTorch's DataLoader on the shards `tandem data pack` wrote: the reference for tandem-loader-bench.

Each image member of the shards (found once with tarfile) is read where it lies, decoded with Pillow
and processed as transformers' CLIPImageProcessor does (shortest edge to --image-size, bicubic;
center crop; rescale to [0, 1]; normalise), by a DataLoader of --workers worker processes in batches
of --batch. Prints one JSON line: {"loader": "pytorch", "workers", "images", "seconds",
"images_per_s", "peak_rss_mib"}, the memory being the main process's peak plus --workers times the
largest worker's.
"""

import argparse
import io
import json
import os
import resource
import tarfile
import time

import numpy as np
import torch
from PIL import Image
from torch.utils.data import DataLoader, Dataset

MEAN = np.array([0.48145466, 0.4578275, 0.40821073], dtype=np.float32)
STD = np.array([0.26862954, 0.26130258, 0.27577711], dtype=np.float32)


class ShardImages(Dataset):
    def __init__(self, directory, size):
        with open(os.path.join(directory, "index.json")) as f:
            index = json.load(f)
        self.size = size
        self.members = []
        for shard in index["shards"]:
            path = os.path.join(directory, shard["file"])
            with tarfile.open(path) as tar:
                for member in tar.getmembers():
                    if member.name.lower().endswith((".png", ".jpg", ".jpeg")):
                        self.members.append((path, member.offset_data, member.size))

    def __len__(self):
        return len(self.members)

    def __getitem__(self, i):
        path, offset, length = self.members[i]
        with open(path, "rb") as f:
            f.seek(offset)
            data = f.read(length)
        image = Image.open(io.BytesIO(data)).convert("RGB")
        width, height = image.size
        short, long = min(width, height), max(width, height)
        resized = (self.size, int(self.size * long / short))  # as transformers' get_resize_output_image_size
        new_w, new_h = resized if width <= height else resized[::-1]
        image = image.resize((new_w, new_h), Image.BICUBIC)
        left, top = (new_w - self.size) // 2, (new_h - self.size) // 2
        image = image.crop((left, top, left + self.size, top + self.size))
        pixels = (np.asarray(image, dtype=np.float32) / 255.0 - MEAN) / STD
        return torch.from_numpy(pixels.transpose(2, 0, 1).copy())


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--shards", required=True)
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--image-size", type=int, default=224)
    args = parser.parse_args()
    torch.set_num_threads(1)
    dataset = ShardImages(args.shards, args.image_size)
    loader = DataLoader(dataset, batch_size=args.batch, num_workers=args.workers, shuffle=False)
    start = time.perf_counter()
    images = 0
    for batch in loader:
        images += batch.shape[0]
    seconds = time.perf_counter() - start
    main_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    worker_kib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    print(json.dumps({"loader": "pytorch", "workers": args.workers, "images": images,
                      "seconds": round(seconds, 3), "images_per_s": round(images / seconds, 1),
                      "peak_rss_mib": round((main_kib + args.workers * worker_kib) / 1024, 1)}))


if __name__ == "__main__":
    main()
