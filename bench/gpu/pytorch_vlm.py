#!/usr/bin/env python3
"""The GPU bench's plain-PyTorch side: the model make_llava.py wrote, trained as a PyTorch user
would train it, on the batch shapes Tandem's bench spec (siglip_qwen2_bench.json) uses.

transformers' LlavaForConditionalGeneration (SDPA attention), torch.optim.AdamW(fused=True) and
clip_grad_norm_(1.0), gradient accumulation over micro-batches. Each sample is one image (its 729
image tokens) and 256 text tokens; the loss is the cross-entropy of the first --targets text tokens
(default: every one after the first), with the head applied to the positions that predict them only,
as Tandem does (transformers' own forward would also compute logits for the 729 image positions and
every text position). scripts/gpu-check passes --targets 10: a shapes caption of Tandem's bench is
8-9 words, one token each with the bench's tokenizer, and the end of text. Precisions, as Tandem's engine names them:
  bf16_full    bf16 weights, gradients and AdamW moments (8 bytes a parameter)
  fp32_master  fp32 weights, gradients and moments under bf16 autocast (16 bytes a parameter)

Prints one JSON object: tokens/s (median step, after warm-up), MFU against the device's peak, peak
GPU memory (allocated and reserved), and, with --profile-steps, where the GPU time goes by kernel
kind (matrix multiply, attention, element-wise, optimizer) and how long the GPU sat idle.

  pytorch_vlm.py MODEL_DIR --precision bf16_full [--micro-batch 4 --micro-batches 4 --steps 20]
"""
import argparse
import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import vlm_flops  # noqa: E402
from kernel_kinds import kernel_kind  # noqa: E402

H100_SXM_BF16_DENSE_TFLOPS = 989.4


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model")
    parser.add_argument("--precision", choices=["bf16_full", "fp32_master"], required=True)
    parser.add_argument("--micro-batch", type=int, default=4)
    parser.add_argument("--micro-batches", type=int, default=4)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--profile-steps", type=int, default=0)
    parser.add_argument("--targets", type=int, default=None,
                        help="text tokens a sample that are targets (default: all but the first)")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--peak-tflops", type=float, default=H100_SXM_BF16_DENSE_TFLOPS)
    args = parser.parse_args()

    import torch
    import torch.nn.functional as F
    from transformers import LlavaForConditionalGeneration

    with open(os.path.join(args.model, "shape.json")) as f:
        shape = json.load(f)
    cuda = args.device.startswith("cuda")
    dtype = torch.bfloat16 if args.precision == "bf16_full" else torch.float32
    model = LlavaForConditionalGeneration.from_pretrained(
        args.model, dtype=dtype, attn_implementation="sdpa").to(args.device)
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-5, betas=(0.9, 0.98),
                                  weight_decay=0.01, fused=cuda)
    v = shape["vision"]
    image_tokens = (v["image_size"] // v["patch_size"]) ** 2
    text = shape["text_tokens"]
    torch.manual_seed(0)
    pixels = torch.randn(args.micro_batch, 3, v["image_size"], v["image_size"], device=args.device,
                         dtype=dtype)
    ids = torch.randint(0, 394, (args.micro_batch, image_tokens + text), device=args.device)
    ids[:, :image_tokens] = shape["image_token_id"]
    targets_per_sample = text - 1 if args.targets is None else args.targets
    if not 0 < targets_per_sample < text:
        parser.error(f"--targets must be in [1, {text - 1}], got {targets_per_sample}")
    targets = ids[:, image_tokens + 1:image_tokens + 1 + targets_per_sample].reshape(-1)

    def step():
        for _ in range(args.micro_batches):
            with torch.autocast(device_type="cuda" if cuda else "cpu", dtype=torch.bfloat16,
                                enabled=args.precision == "fp32_master"):
                hidden = model.model(input_ids=ids, pixel_values=pixels).last_hidden_state
                logits = model.lm_head(hidden[:, image_tokens:image_tokens + targets_per_sample])
            loss = F.cross_entropy(logits.float().reshape(-1, logits.size(-1)), targets)
            (loss / args.micro_batches).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return loss

    def sync():
        if cuda:
            torch.cuda.synchronize()

    times = []
    for i in range(args.steps):
        sync()
        start = time.perf_counter()
        loss = step()
        sync()
        times.append(time.perf_counter() - start)
    measured = times[args.warmup:] or times
    step_s = statistics.median(measured)
    samples = args.micro_batch * args.micro_batches
    tokens_per_s = samples * (image_tokens + text) / step_s
    flops_per_sample = vlm_flops.training_flops_per_sample(shape, head_rows=targets_per_sample)
    flops = flops_per_sample * samples / step_s
    result = {
        "precision": args.precision,
        "device": torch.cuda.get_device_name() if cuda else "cpu",
        "torch": torch.__version__,
        "parameters": sum(p.numel() for p in model.parameters()),
        "samples_per_step": samples,
        "tokens_per_sample": image_tokens + text,
        "step_s_median": step_s,
        "step_s": times,
        "tokens_per_s": tokens_per_s,
        "tflops": flops / 1e12,
        "targets_per_sample": targets_per_sample,
        "flops_per_sample": flops_per_sample,
        "mfu": flops / (args.peak_tflops * 1e12),
        "peak_tflops": args.peak_tflops,
        "final_loss": float(loss.detach()),
    }
    if cuda:
        result["peak_allocated_bytes"] = torch.cuda.max_memory_allocated()
        result["peak_reserved_bytes"] = torch.cuda.max_memory_reserved()
    if args.profile_steps > 0:
        from torch.profiler import ProfilerActivity, profile
        activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
        sync()
        start = time.perf_counter()
        with profile(activities=activities) as prof:
            for _ in range(args.profile_steps):
                step()
            sync()
        wall_us = (time.perf_counter() - start) * 1e6
        kinds = {}
        kernels = []
        for event in prof.key_averages():
            if not str(event.device_type).endswith("CUDA"):
                continue  # CPU operators: their kernels are events of their own
            device_us = getattr(event, "self_device_time_total", None)
            if device_us is None:
                device_us = getattr(event, "self_cuda_time_total", 0)
            if device_us <= 0:
                continue
            kind = kernel_kind(event.key)
            kinds[kind] = kinds.get(kind, 0) + device_us
            kernels.append((device_us, event.key[:120], event.count))
        busy = sum(kinds.values())
        kernels.sort(reverse=True)
        result["profile"] = {
            "steps": args.profile_steps,
            "wall_ms": wall_us / 1e3,
            "gpu_busy_ms": busy / 1e3,
            "gpu_idle_fraction": max(0.0, 1 - busy / wall_us) if wall_us > 0 else None,
            "share_by_kind": {k: round(t / busy, 4) for k, t in sorted(kinds.items())} if busy else {},
            "top_kernels": [{"ms": round(t / 1e3, 3), "calls": c, "name": n}
                            for t, n, c in kernels[:12]],
        }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
