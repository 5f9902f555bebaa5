#!/usr/bin/env python3
"""An exported run, loaded by transformers, generates what `tandem generate` generates.

Trains a short shapes run with `tandem run --colocated`, exports it with `tandem export --format hf`
(in small shards), loads it with LlavaForConditionalGeneration.from_pretrained (nothing missing,
nothing unexpected), and for each held-out image of examples/jsonl/ compares transformers' greedy
tokens with `tandem generate`'s, from the export, from the run directory and from its last checkpoint.
Then the same for a short run on a pretrained CLIP tower (tests/fixtures/hf/clip_vision), which
exports with a CLIP tower and CLIP's preprocessing.

Needs transformers, torch and Pillow (tests/fixtures/hf/requirements.txt, installed into .venv/ by
scripts/venv); exits 77, which ctest reports as skipped, when they cannot be imported.

    export_roundtrip_test.py --tandem build/tandem --examples examples --fixtures tests/fixtures/hf
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

try:
    import torch
    from PIL import Image
    from transformers import AutoTokenizer, LlavaForConditionalGeneration
    from transformers.models.clip.image_processing_pil_clip import CLIPImageProcessorPil
    from transformers.models.siglip.image_processing_pil_siglip import SiglipImageProcessorPil
except ImportError as error:
    print(f"skipped: {error} (pip install -r tests/fixtures/hf/requirements.txt)")
    sys.exit(77)

# Long enough for the captions to depend on the image (the loss leaves its plateau), so that the
# comparison covers different outputs.
ENGINE = {"optimizer": {"type": "AdamW", "params": {"lr": 1.5e-3, "betas": [0.9, 0.98], "weight_decay": 0.01}},
          "scheduler": {"type": "WarmupCosineLR", "params": {"warmup_num_steps": 100, "total_num_steps": 600}},
          "gradient_clipping": 1.0}
SPEC = {
    "name": "roundtrip",
    "data": {"shapes": {"seed": 1, "train_samples": 20000, "eval_samples": 64}, "max_text_tokens": 12},
    "vision": {"model": {"preset": "vit-tiny", "positions": "sincos"}, "engine": ENGINE},
    "llm": {"model": {"preset": "llm-tiny"}, "engine": ENGINE},
    "schedule": {"global_batch": 64, "steps": 600, "eval_every": 0, "eval_samples": 64, "seed": 1},
}


# A pretrained CLIP tower (the fixture of tests/fixtures/hf/clip_vision), frozen, with a new
# projector and a from-scratch LLM: exported with a CLIP tower and CLIP's preprocessing.
CLIP_SPEC = {
    "name": "roundtrip-clip",
    "data": {"shapes": {"seed": 1, "train_samples": 2048, "eval_samples": 16}, "max_text_tokens": 12},
    "vision": {"pretrained": "CLIP_DIR", "freeze": ["patch_embed.*", "class_token", "positions", "pre_norm.*",
                                                   "blocks.*"], "engine": ENGINE},
    "llm": {"model": {"preset": "llm-tiny"}, "engine": ENGINE},
    "schedule": {"global_batch": 32, "steps": 40, "eval_every": 0, "eval_samples": 16, "seed": 1},
}


def run(*args):
    result = subprocess.run(args, capture_output=True, text=True)
    if result.returncode != 0:
        sys.exit(f"{' '.join(args)} failed ({result.returncode}):\n{result.stdout}\n{result.stderr}")
    return result.stdout


def processor_for(directory):
    with open(os.path.join(directory, "preprocessor_config.json")) as f:
        config = json.load(f)
    kind = CLIPImageProcessorPil if config["image_processor_type"].startswith("CLIP") else SiglipImageProcessorPil
    return kind(**{k: v for k, v in config.items() if k != "image_processor_type"})


def compare(tandem, examples, out, sources, need_distinct):
    model, info = LlavaForConditionalGeneration.from_pretrained(out, output_loading_info=True)
    problems = {key: value for key, value in info.items() if value}
    assert not problems, f"transformers reports {problems}"
    model.eval()
    tokenizer = AutoTokenizer.from_pretrained(out)
    processor = processor_for(out)
    with open(os.path.join(examples, "jsonl", "eval.jsonl")) as f:
        samples = [json.loads(line) for line in f if line.strip()]
    compared, distinct = 0, set()
    for sample in samples:
        image_path = os.path.join(examples, "jsonl", sample["image"])
        ids = tokenizer("<image>")["input_ids"]
        expanded = []
        for i in ids:
            expanded += [model.config.image_token_index] * model.config.image_seq_length \
                if i == model.config.image_token_index else [i]
        pixels = processor(images=Image.open(image_path).convert("RGB"), return_tensors="pt")["pixel_values"]
        with torch.no_grad():
            theirs = model.generate(input_ids=torch.tensor([expanded]), pixel_values=pixels, max_new_tokens=12,
                                    do_sample=False)[0, len(expanded):].tolist()
        for source in sources:
            ours = json.loads(run(tandem, "generate", "--model", source, "--image", image_path,
                                  "--prompt", "<image>", "--max-new-tokens", "12", "--output", "json"))
            assert ours["token_ids"] == theirs, (
                f"{sample['image']} from {source}: tandem {ours['token_ids']}, transformers {theirs}")
            assert ours["text"] == tokenizer.decode(theirs, skip_special_tokens=True)
            assert ours["prompt_tokens"] == len(expanded)
        print(f"{out}: {sample['image']}: {tokenizer.decode(theirs, skip_special_tokens=True)!r} "
              f"(caption: {sample['text']!r})")
        compared += 1
        distinct.add(tuple(theirs))
    assert compared >= 4, f"only {compared} images"
    if need_distinct:
        assert len(distinct) > 1, "every image got the same caption: the run did not learn to read images"
    print(f"{out}: {compared} images, transformers and tandem generate agree")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--tandem", required=True)
    parser.add_argument("--examples", required=True)
    parser.add_argument("--fixtures", required=True)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        spec = os.path.join(tmp, "spec.json")
        with open(spec, "w") as f:
            json.dump(SPEC, f)
        run_dir, out = os.path.join(tmp, "run"), os.path.join(tmp, "hf")
        run(args.tandem, "run", spec, "--colocated", "--run-dir", run_dir, "--threads", "1")
        run(args.tandem, "export", run_dir, out, "--format", "hf", "--max-shard-size", "100KB")
        assert os.path.exists(os.path.join(out, "model.safetensors.index.json")), "expected shards"
        compare(args.tandem, args.examples, out,
                (out, run_dir, os.path.join(run_dir, "checkpoints", "step-000600")), need_distinct=True)

        clip_spec = json.loads(json.dumps(CLIP_SPEC).replace("CLIP_DIR", os.path.join(os.path.abspath(args.fixtures), "clip_vision")))
        with open(spec, "w") as f:
            json.dump(clip_spec, f)
        clip_run, clip_out = os.path.join(tmp, "clip-run"), os.path.join(tmp, "clip-hf")
        run(args.tandem, "run", spec, "--colocated", "--run-dir", clip_run, "--threads", "1")
        run(args.tandem, "export", clip_run, clip_out, "--format", "hf")
        with open(os.path.join(clip_out, "config.json")) as f:
            assert json.load(f)["vision_config"]["model_type"] == "clip_vision_model"
        compare(args.tandem, args.examples, clip_out, (clip_out, clip_run), need_distinct=False)


if __name__ == "__main__":
    main()
