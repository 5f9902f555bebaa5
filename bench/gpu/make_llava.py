#!/usr/bin/env python3
"""Writes a LLaVA model directory with random weights for the GPU bench (bench/README.md, "On a GPU").

The realistic shape: a SigLIP-B/16 tower (hidden 768, 12 layers, 12 heads, MLP 3072) at 432 px, so
27 x 27 = 729 image tokens, and a Qwen2-0.5B LLM (hidden 896, 24 layers, 14 heads, 2 KV heads, MLP
4864, vocabulary 151936, tied embeddings), with LLaVA's two-layer GELU projector. Weights are drawn
by transformers' own initialisation (LlavaForConditionalGeneration from the config) and saved in
bf16: nothing is downloaded. The tokenizer is the small Qwen2-style one of the test fixture
tests/fixtures/hf/siglip_qwen2 (398 tokens; the model keeps Qwen2's 151936 rows, as Qwen2 itself has
more rows than tokens), so Tandem and the PyTorch reference run the same model on the same shapes.

Also writes shape.json (the dimensions, for vlm_flops.py) beside the model.

  make_llava.py OUT_DIR [--fixture DIR] [--tiny] [--device cuda]
"""
import argparse
import json
import os
import shutil
import sys

REALISTIC = {
    "vision": {"image_size": 432, "patch_size": 16, "hidden": 768, "layers": 12, "heads": 12,
               "mlp": 3072},
    "llm": {"hidden": 896, "layers": 24, "heads": 14, "kv_heads": 2, "mlp": 4864, "vocab": 151936},
    "text_tokens": 256,
}
# The same code path at a size a CPU runs in seconds (scripts/gpu-check --dry-run).
TINY = {
    "vision": {"image_size": 64, "patch_size": 16, "hidden": 64, "layers": 2, "heads": 4, "mlp": 128},
    "llm": {"hidden": 64, "layers": 2, "heads": 4, "kv_heads": 2, "mlp": 128, "vocab": 4096},
    "text_tokens": 128,
}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out")
    here = os.path.dirname(os.path.abspath(__file__))
    parser.add_argument("--fixture", default=os.path.join(here, "..", "..", "tests", "fixtures", "hf",
                                                          "siglip_qwen2"))
    parser.add_argument("--tiny", action="store_true", help="a tiny model of the same kind")
    parser.add_argument("--device", default="cpu", help="where to draw the weights (cuda is faster)")
    args = parser.parse_args()
    shape = TINY if args.tiny else REALISTIC

    import torch
    from transformers import AutoConfig, LlavaForConditionalGeneration

    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.fixture, "config.json")) as f:
        config = json.load(f)
    v, l = shape["vision"], shape["llm"]
    config["vision_config"].update({
        "image_size": v["image_size"], "patch_size": v["patch_size"], "hidden_size": v["hidden"],
        "num_hidden_layers": v["layers"], "num_attention_heads": v["heads"],
        "intermediate_size": v["mlp"]})
    config["text_config"].update({
        "hidden_size": l["hidden"], "num_hidden_layers": l["layers"],
        "num_attention_heads": l["heads"], "num_key_value_heads": l["kv_heads"],
        "intermediate_size": l["mlp"], "vocab_size": l["vocab"], "max_position_embeddings": 32768,
        "layer_types": ["full_attention"] * l["layers"], "initializer_range": 0.02})
    config["image_seq_length"] = (v["image_size"] // v["patch_size"]) ** 2
    with open(os.path.join(args.out, "config.json"), "w") as f:
        json.dump(config, f, indent=2)
    for name in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja",
                 "generation_config.json"):
        if os.path.exists(os.path.join(args.fixture, name)):
            shutil.copy(os.path.join(args.fixture, name), args.out)
    with open(os.path.join(args.fixture, "preprocessor_config.json")) as f:
        preprocessor = json.load(f)
    preprocessor["size"] = {"height": v["image_size"], "width": v["image_size"]}
    with open(os.path.join(args.out, "preprocessor_config.json"), "w") as f:
        json.dump(preprocessor, f, indent=2)

    torch.manual_seed(0)
    with torch.device(args.device):
        model = LlavaForConditionalGeneration(AutoConfig.from_pretrained(args.out))
    model = model.to(torch.bfloat16)
    model.save_pretrained(args.out)
    shape = dict(shape, image_token_id=config["image_token_index"],
                 parameters=sum(p.numel() for p in model.parameters()))
    with open(os.path.join(args.out, "shape.json"), "w") as f:
        json.dump(shape, f, indent=2)
    print(f"make_llava.py: {args.out}: {shape['parameters'] / 1e6:.1f}M parameters", file=sys.stderr)


if __name__ == "__main__":
    main()
