#!/usr/bin/env python3
"""Writes the heterogeneous load bench/mixed_load.sh trains on: a LLaVA-NeXT checkpoint with random
weights made from configs by transformers, and LLaVA-format conversations that mix what real
instruction data mixes.

    mixed_load.py --out DIR [--samples 480] [--seed 0]

DIR/model/: LlavaNextForConditionalGeneration, a CLIP-style tower (width 256, 6 layers; 56-pixel
tiles of 14-pixel patches, 4 x 4 features a tile) and a Llama (width 128, 2 layers), LLaVA-NeXT's pinpoints scaled
to 56-pixel tiles (an image is 3 to 5 tiles with its base), the tokenizer of
tests/fixtures/hf/clip_llama_next.
DIR/train.json: 50% text-only samples (12 to 32 tokens), 32% one image (12 to 56 tokens), 8% two
or three images (32 to 96 tokens), 10% three or four images with a long answer (416 to 512 tokens):
most micro-batches light, some several times heavier; images of random sizes from 40 to 240 pixels
a side (so each picks its own pinpoint). The script prints the workload gap of the mix: the
positions (text and image features) of the heaviest of the epoch's batches of 12 over the
lightest's; bench/mixed_load.sh also reports the gap between the steps a run drew.

Needs torch, transformers and Pillow (tests/fixtures/hf/requirements.txt, in .venv/).
"""
import argparse
import json
import os
import random
import shutil

import numpy as np
import torch
from PIL import Image, ImageDraw
from transformers import (AutoTokenizer, CLIPVisionConfig, LlamaConfig, LlavaNextConfig,
                          LlavaNextForConditionalGeneration, LlavaNextImageProcessor,
                          LlavaNextProcessor)

HERE = os.path.dirname(os.path.abspath(__file__))
FIXTURE = os.path.join(HERE, "..", "tests", "fixtures", "hf", "clip_llama_next")
TILE = 56
BATCH = 12  # bench/mixed_load.sh's global batch
PINPOINTS = [[TILE, 2 * TILE], [2 * TILE, TILE], [2 * TILE, 2 * TILE], [3 * TILE, TILE], [TILE, 3 * TILE]]
COLOURS = ["red", "green", "blue", "yellow", "purple", "orange", "white", "cyan"]
SHAPES = ["circle", "square", "triangle", "star", "cross"]
WORDS = ("the shape is small and bright it sits near the edge of a plain dark field while another one "
         "waits at the far side what colour do you see there is a line between them").split()


def write_model(out, tokenizer):
    vision = CLIPVisionConfig(hidden_size=256, intermediate_size=1024, num_hidden_layers=6, num_attention_heads=4,
                              image_size=TILE, patch_size=14, hidden_act="quick_gelu")
    text = LlamaConfig(hidden_size=128, intermediate_size=344, num_hidden_layers=2, num_attention_heads=4,
                       num_key_value_heads=4, vocab_size=len(tokenizer), max_position_embeddings=2048,
                       tie_word_embeddings=True, bos_token_id=tokenizer.bos_token_id,
                       eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id)
    config = LlavaNextConfig(vision_config=vision, text_config=text,
                             image_token_index=tokenizer.convert_tokens_to_ids("<image>"),
                             vision_feature_layer=-2, vision_feature_select_strategy="default",
                             image_grid_pinpoints=PINPOINTS, tie_word_embeddings=True)
    torch.manual_seed(0)
    model = LlavaNextForConditionalGeneration(config)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    with open(os.path.join(out, "preprocessor_config.json"), "w") as f:
        json.dump({"image_processor_type": "LlavaNextImageProcessor", "do_resize": True,
                   "size": {"shortest_edge": TILE}, "resample": 3, "do_center_crop": True,
                   "crop_size": {"height": TILE, "width": TILE}, "do_rescale": True, "rescale_factor": 1 / 255,
                   "do_normalize": True, "image_mean": [0.5, 0.5, 0.5], "image_std": [0.5, 0.5, 0.5],
                   "image_grid_pinpoints": PINPOINTS}, f, indent=1)


def shape_image(rng, path):
    height, width = rng.randint(40, 240), rng.randint(40, 240)
    image = Image.new("RGB", (width, height), tuple(rng.randint(0, 60) for _ in range(3)))
    draw = ImageDraw.Draw(image)
    for _ in range(rng.randint(1, 3)):
        x, y = rng.randint(0, width - 10), rng.randint(0, height - 10)
        size = rng.randint(8, max(9, min(width, height) // 2))
        draw.ellipse([x, y, x + size, y + size], fill=tuple(rng.randint(80, 255) for _ in range(3)))
    image.save(path)


def words(rng, tokenizer, tokens):
    """About `tokens` tokens of filler text."""
    text = ""
    while len(tokenizer(text, add_special_tokens=False)["input_ids"]) < tokens:
        text += " ".join(rng.choice(WORDS) for _ in range(8)) + " "
    return text.strip()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument("--samples", type=int, default=480)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    rng = random.Random(args.seed)
    shutil.rmtree(args.out, ignore_errors=True)
    os.makedirs(os.path.join(args.out, "images"))
    tokenizer = AutoTokenizer.from_pretrained(FIXTURE)
    write_model(os.path.join(args.out, "model"), tokenizer)
    samples, image_count = [], 0
    for i in range(args.samples):
        # Short questions and answers about no image or one, a few samples of several images, and
        # one in ten a long description of three or four: most steps are light and some several
        # times heavier, as instruction mixes are.
        kind = rng.random()
        if kind < 0.50:
            images, question, answer = 0, rng.randint(8, 16), rng.randint(4, 16)
        elif kind < 0.82:
            images, question, answer = 1, rng.randint(8, 24), rng.randint(4, 32)
        elif kind < 0.90:
            images, question, answer = rng.randint(2, 3), rng.randint(16, 32), rng.randint(16, 64)
        else:
            images, question, answer = rng.randint(3, 4), rng.randint(16, 32), rng.randint(400, 480)
        files = []
        for _ in range(images):
            name = f"images/{image_count:05d}.png"
            shape_image(rng, os.path.join(args.out, name))
            files.append(name)
            image_count += 1
        question = words(rng, tokenizer, question)
        answer = words(rng, tokenizer, answer)
        sample = {"conversations": [{"from": "human", "value": "<image>\n" * images + question},
                                    {"from": "gpt", "value": answer}]}
        if files:
            sample["image"] = files if len(files) > 1 else files[0]
        samples.append(sample)
    with open(os.path.join(args.out, "train.json"), "w") as f:
        json.dump(samples, f)
    # The workload of each batch of 12 in file order (the samples are drawn at random, so these are
    # the batches of one epoch): every sample's positions, its image features included, as
    # transformers' LlavaNextProcessor expands them.
    processor = LlavaNextProcessor(image_processor=LlavaNextImageProcessor.from_pretrained(
        os.path.join(args.out, "model")), tokenizer=tokenizer, patch_size=14,
        vision_feature_select_strategy="default")
    positions = []
    for s in samples:
        text = " ".join(t["value"] for t in s["conversations"])
        files = s.get("image", [])
        files = [files] if isinstance(files, str) else files
        images = [Image.open(os.path.join(args.out, f)).convert("RGB") for f in files] or None
        positions.append(len(processor(text=text, images=images)["input_ids"][0]))
    loads = [sum(positions[b:b + BATCH]) for b in range(0, len(samples) - BATCH + 1, BATCH)]
    print(json.dumps({"samples": len(samples), "images": image_count, "batches": len(loads),
                      "batch_positions_min": min(loads), "batch_positions_max": max(loads),
                      "gap": round(max(loads) / min(loads), 2)}))


if __name__ == "__main__":
    main()
