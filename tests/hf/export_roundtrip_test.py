#!/usr/bin/env python3
"""An exported run, loaded by transformers, generates what `tandem generate` generates.

Trains a short shapes run with `tandem run --colocated`, exports it with `tandem export --format hf`
(in small shards), loads it with LlavaForConditionalGeneration.from_pretrained (nothing missing,
nothing unexpected), and for each held-out image of examples/jsonl/ compares transformers' greedy
tokens with `tandem generate`'s, from the export, from the run directory and from its last checkpoint.
Then the same for a short run on a pretrained CLIP tower (tests/fixtures/hf/clip_vision), which
exports with a CLIP tower and CLIP's preprocessing; for LLaVA's second stage started from the first
export (`pretrained`, shapes conversations), asked through its "tandem" chat template; and for a
whole pretrained LLaVA of SigLIP and Qwen2 (tests/fixtures/hf/siglip_qwen2) fine-tuned on the
captions, which exports as Qwen2 with its own tokenizer files and ChatML; and for LLaVA's first stage
from two towers, a CLIP tower and a Llama without an "<image>" token, which the export carries; and
for a LLaVA-NeXT checkpoint (tests/fixtures/hf/clip_llama_next: any-resolution tiles) fine-tuned on
conversations with images of three sizes, which exports as LlavaNextForConditionalGeneration; and for
Tandem's own tower and LLM trained from scratch with LLaVA-NeXT's tiles on the same conversations.

Needs transformers, torch and Pillow (tests/fixtures/hf/requirements.txt, installed into .venv/ by
scripts/venv); exits 77, which ctest reports as skipped, when they cannot be imported.

    export_roundtrip_test.py --tandem build/tandem --examples examples --fixtures tests/fixtures/hf
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile

try:
    import torch
    from PIL import Image
    from transformers import AutoTokenizer, LlavaForConditionalGeneration, LlavaNextForConditionalGeneration
    from transformers import LlavaNextProcessor
    from transformers.models.llava_next.image_processing_pil_llava_next import LlavaNextImageProcessorPil
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


# LLaVA's second stage from an export (PRETRAINED_DIR): the projector and the LLM on conversations.
# 300 steps (15 s here): past the warm-up, at 81% held-out exact match and a loss of 0.14; at 60 steps (loss
# 0.69, 25%) whether two images got different answers turned on the last bits of the arithmetic.
CHAT_SPEC = {
    "name": "roundtrip-chat",
    "data": {"shapes": {"seed": 2, "train_samples": 4096, "eval_samples": 16, "conversations": True},
             "max_text_tokens": 40},
    "pretrained": "PRETRAINED_DIR",
    "vision": {"freeze": ["patch_embed.*", "positions", "blocks.*"], "engine": ENGINE},
    "llm": {"engine": ENGINE},
    "schedule": {"global_batch": 32, "steps": 300, "eval_every": 0, "eval_samples": 16, "seed": 1},
}
QUESTIONS = ["<image>\nWhat colour is the shape?", "<image>\nWhere is the shape?"]


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


def compare(tandem, examples, out, sources, need_distinct, questions=None):
    """Greedy tokens of transformers and of `tandem generate` (from each of `sources`) for every
    held-out image, asked "<image>" raw, or each of `questions` through the chat template."""
    model, info = LlavaForConditionalGeneration.from_pretrained(out, output_loading_info=True)
    problems = {key: value for key, value in info.items() if value}
    assert not problems, f"transformers reports {problems}"
    model.eval()
    tokenizer = AutoTokenizer.from_pretrained(out)
    processor = processor_for(out)
    with open(os.path.join(examples, "jsonl", "eval.jsonl")) as f:
        samples = [json.loads(line) for line in f if line.strip()]
    prompts = [("<image>", False)] if questions is None else [(q, True) for q in questions]
    compared, distinct = 0, set()
    for sample in samples:
        image_path = os.path.join(examples, "jsonl", sample["image"])
        pixels = processor(images=Image.open(image_path).convert("RGB"), return_tensors="pt")["pixel_values"]
        for prompt, chat in prompts:
            if chat:
                text = tokenizer.apply_chat_template([{"role": "user", "content": prompt}], tokenize=False,
                                                     add_generation_prompt=True)
                ids = tokenizer(text, add_special_tokens=False)["input_ids"]
            else:
                ids = tokenizer(prompt)["input_ids"]
            expanded = []
            for i in ids:
                expanded += [model.config.image_token_index] * model.config.image_seq_length \
                    if i == model.config.image_token_index else [i]
            with torch.no_grad():
                theirs = model.generate(input_ids=torch.tensor([expanded]), pixel_values=pixels, max_new_tokens=12,
                                        do_sample=False)[0, len(expanded):].tolist()
            for source in sources:
                ours = json.loads(run(tandem, "generate", "--model", source, "--image", image_path,
                                      "--prompt", prompt, "--max-new-tokens", "12", "--output", "json",
                                      *(["--chat"] if chat else [])))
                # transformers runs to max_new_tokens past an end-of-turn token that is not the eos.
                stop = len(ours["token_ids"])
                assert ours["token_ids"] == theirs[:stop], (
                    f"{sample['image']} {prompt!r} from {source}: tandem {ours['token_ids']}, transformers {theirs}")
                assert ours["prompt_tokens"] == len(expanded)
            print(f"{out}: {sample['image']} {prompt!r}: {tokenizer.decode(theirs, skip_special_tokens=True)!r} "
                  f"(caption: {sample['text']!r})")
            compared += 1
            distinct.add(tuple(theirs))
    assert compared >= 4, f"only {compared} images"
    if need_distinct:
        assert len(distinct) > 1, "every image got the same answer: the run did not learn to read images"
    print(f"{out}: {compared} prompts, transformers and tandem generate agree")


# A LLaVA-NeXT checkpoint (NEXT_DIR) fine-tuned on conversations whose images come in three sizes.
NEXT_SPEC = {
    "name": "roundtrip-next",
    "data": {"conversations": {"train": "TRAIN_FILE"}, "max_text_tokens": 78, "max_images_per_sample": 2},
    "pretrained": "NEXT_DIR",
    "vision": {"engine": ENGINE},
    "llm": {"engine": ENGINE},
    "schedule": {"global_batch": 4, "steps": 4, "eval_every": 0, "seed": 1},
}


# Tandem's own tower and LLM trained from scratch with LLaVA-NeXT's tiles on the same conversations: the
# export is a LLaVA-NeXT of a SigLIP tower, a Llama and the word tokenizer, whose "<image>" is the id the run
# trained after the words.
OWN_NEXT_SPEC = {
    "name": "roundtrip-own-next",
    "data": {"conversations": {"train": "TRAIN_FILE"}, "max_text_tokens": 24, "max_images_per_sample": 2},
    "vision": {"model": {"preset": "vit-tiny", "grid_pinpoints": [[32, 32], [32, 64], [64, 32], [64, 64]]},
               "engine": ENGINE},
    "llm": {"model": {"preset": "llm-tiny", "max_seq_len": 256}, "engine": ENGINE},
    "schedule": {"global_batch": 4, "steps": 30, "eval_every": 0, "seed": 1},
}


def compare_next(tandem, fixtures, out, sources):
    """Greedy tokens of transformers' LlavaNextForConditionalGeneration (its processor cutting each
    image into tiles by its size) and of `tandem generate` from each of `sources`, for a wide and a
    tall image asked raw, and for both in one prompt."""
    model, info = LlavaNextForConditionalGeneration.from_pretrained(out, output_loading_info=True)
    problems = {key: value for key, value in info.items() if value}
    assert not problems, f"transformers reports {problems}"
    model.eval()
    tokenizer = AutoTokenizer.from_pretrained(out)
    with open(os.path.join(out, "preprocessor_config.json")) as f:
        settings = json.load(f)
    assert settings["image_processor_type"] == "LlavaNextImageProcessor"
    image_processor = LlavaNextImageProcessorPil(**{k: v for k, v in settings.items() if k != "image_processor_type"})
    vision = model.config.vision_config
    processor = LlavaNextProcessor(image_processor=image_processor, tokenizer=tokenizer, patch_size=vision.patch_size,
                                   vision_feature_select_strategy=model.config.vision_feature_select_strategy,
                                   num_additional_image_tokens=1 if vision.model_type == "clip_vision_model" else 0)
    reference = os.path.join(fixtures, "reference")
    for prompt, files in [("<image>\nWhat is it?", ["image.png"]), ("<image>\nWhat is it?", ["tall.png"]),
                          ("<image> or <image>?", ["tall.png", "image.png"])]:
        images = [Image.open(os.path.join(reference, f)).convert("RGB") for f in files]
        inputs = processor(images=images, text=[prompt], return_tensors="pt")
        with torch.no_grad():
            theirs = model.generate(**inputs, max_new_tokens=12, do_sample=False)[0, inputs["input_ids"].shape[1]:]
        for source in sources:
            ours = json.loads(run(tandem, "generate", "--model", source, "--prompt", prompt, "--max-new-tokens", "12",
                                  "--output", "json", *[a for f in files for a in ("--image", os.path.join(reference, f))]))
            stop = len(ours["token_ids"])
            assert ours["token_ids"] == theirs.tolist()[:stop], (
                f"{files} {prompt!r} from {source}: tandem {ours['token_ids']}, transformers {theirs.tolist()}")
            assert ours["prompt_tokens"] == inputs["input_ids"].shape[1]
        print(f"{out}: {files} {prompt!r}: {tokenizer.decode(theirs, skip_special_tokens=True)!r}")
    print(f"{out}: LLaVA-NeXT, transformers and tandem generate agree")


def run_and_export(tandem, tmp, name, spec, **export_flags):
    path = os.path.join(tmp, name + ".json")
    with open(path, "w") as f:
        json.dump(spec, f)
    run_dir, out = os.path.join(tmp, name + "-run"), os.path.join(tmp, name + "-hf")
    run(tandem, "run", path, "--colocated", "--run-dir", run_dir, "--threads", "1")
    run(tandem, "export", run_dir, out, "--format", "hf", *[a for k, v in export_flags.items() for a in (k, v)])
    return run_dir, out


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--tandem", required=True)
    parser.add_argument("--examples", required=True)
    parser.add_argument("--fixtures", required=True)
    args = parser.parse_args()
    fixtures = os.path.abspath(args.fixtures)
    with tempfile.TemporaryDirectory() as tmp:
        run_dir, out = run_and_export(args.tandem, tmp, "shapes", SPEC, **{"--max-shard-size": "100KB"})
        assert os.path.exists(os.path.join(out, "model.safetensors.index.json")), "expected shards"
        compare(args.tandem, args.examples, out,
                (out, run_dir, os.path.join(run_dir, "checkpoints", "step-000600")), need_distinct=True)

        clip_spec = json.loads(json.dumps(CLIP_SPEC).replace("CLIP_DIR", os.path.join(fixtures, "clip_vision")))
        clip_run, clip_out = run_and_export(args.tandem, tmp, "clip", clip_spec)
        with open(os.path.join(clip_out, "config.json")) as f:
            assert json.load(f)["vision_config"]["model_type"] == "clip_vision_model"
        compare(args.tandem, args.examples, clip_out, (clip_out, clip_run), need_distinct=False)

        # The second stage of LLaVA's recipe, from the first export.
        chat_spec = json.loads(json.dumps(CHAT_SPEC).replace("PRETRAINED_DIR", out))
        chat_run, chat_out = run_and_export(args.tandem, tmp, "chat", chat_spec)
        compare(args.tandem, args.examples, chat_out, (chat_out, chat_run), need_distinct=True, questions=QUESTIONS)

        # A whole pretrained SigLIP + Qwen2 LLaVA, fine-tuned on captions with ChatML.
        qwen_spec = json.loads(json.dumps(CHAT_SPEC).replace("PRETRAINED_DIR", os.path.join(fixtures, "siglip_qwen2")))
        qwen_spec["vision"]["freeze"] = ["*"]
        qwen_spec["data"]["shapes"]["conversations"] = False  # its tokenizer spends ~110 tokens on one
        qwen_spec["data"]["max_text_tokens"] = 112
        qwen_spec["schedule"]["steps"] = 4
        qwen_run, qwen_out = run_and_export(args.tandem, tmp, "qwen", qwen_spec)
        with open(os.path.join(qwen_out, "config.json")) as f:
            assert json.load(f)["text_config"]["model_type"] == "qwen2"
        compare(args.tandem, args.examples, qwen_out, (qwen_out,), need_distinct=False, questions=QUESTIONS)

        # LLaVA's first stage from two towers: a CLIP tower and a Llama whose tokenizer has no "<image>"
        # (the job adds one after the vocabulary), both frozen, a new projector training.
        llama = os.path.join(tmp, "llama")
        shutil.copytree(os.path.join(fixtures, "llama"), llama)
        with open(os.path.join(llama, "tokenizer.json")) as f:
            tokenizer = json.load(f)
        for token in tokenizer["added_tokens"]:  # renamed, so that the ids stay contiguous
            if token["content"] == "<image>":
                token["content"] = "<mask>"
        with open(os.path.join(llama, "tokenizer.json"), "w") as f:
            json.dump(tokenizer, f)
        towers_spec = json.loads(json.dumps(CLIP_SPEC).replace("CLIP_DIR", os.path.join(fixtures, "clip_vision")))
        towers_spec["llm"] = {"pretrained": llama, "freeze": ["*"], "engine": ENGINE}
        towers_spec["data"]["max_text_tokens"] = 64
        towers_spec["schedule"]["steps"] = 4
        towers_run, towers_out = run_and_export(args.tandem, tmp, "towers", towers_spec)
        with open(os.path.join(towers_out, "config.json")) as f:
            assert json.load(f)["image_token_index"] == 410
        compare(args.tandem, args.examples, towers_out, (towers_out,), need_distinct=False, questions=QUESTIONS)

        # A LLaVA-NeXT checkpoint fine-tuned on conversations with images of three sizes.
        data = os.path.join(tmp, "next-data")
        os.makedirs(data)
        for name in ("next_conversations.json", "image.png", "image2.png", "tall.png"):
            shutil.copy(os.path.join(fixtures, "reference", name), data)
        next_spec = json.loads(json.dumps(NEXT_SPEC).replace("NEXT_DIR", os.path.join(fixtures, "clip_llama_next"))
                               .replace("TRAIN_FILE", os.path.join(data, "next_conversations.json")))
        next_run, next_out = run_and_export(args.tandem, tmp, "next", next_spec)
        with open(os.path.join(next_out, "config.json")) as f:
            config = json.load(f)
        assert config["model_type"] == "llava_next" and config["image_grid_pinpoints"], config
        compare_next(args.tandem, fixtures, next_out, (next_out, next_run))

        own_spec = json.loads(json.dumps(OWN_NEXT_SPEC).replace("TRAIN_FILE", os.path.join(data, "next_conversations.json")))
        own_run, own_out = run_and_export(args.tandem, tmp, "own-next", own_spec)
        with open(os.path.join(own_out, "config.json")) as f:
            config = json.load(f)
        assert config["model_type"] == "llava_next" and config["vision_config"]["model_type"] == "siglip_vision_model"
        with open(os.path.join(own_run, "tokenizer.json")) as f:
            assert config["image_token_index"] == len(json.load(f)["words"]), config["image_token_index"]
        compare_next(args.tandem, fixtures, own_out, (own_out, own_run))


if __name__ == "__main__":
    main()
