"""The shapes VLM trained in plain PyTorch, one process: Tandem's baseline.

    python bench/pytorch_reference.py train DUMP_DIR --run-dir DIR [--threads 2] [--adamw fused]
    python bench/pytorch_reference.py report DUMP_DIR PYTORCH_DIR COLOCATED_DIR RUN_DIR

DUMP_DIR is what `tandem-dataset-dump JOB.json --out DUMP_DIR` wrote: the job's training samples
in the order Tandem's sampler draws them, its held-out samples, the tokenizer, both model configs
and seeds, each group's resolved optimizer, schedule, clipping and compute dtype
(bench/dataset_dump.cc). `train` builds the two models of models/README.md (ViT encoder and
Llama-style decoder, the same parameter names, construction order and initialisation, from the same
seeds), trains them for the dump's steps and evaluates at the job's evaluation points, writing
metrics.jsonl and summary.json in the layout of a Tandem run directory. `report` prints the table
comparing it with the two Tandem runs of the same job.

What is the same as Tandem's step (trainer/colocated.cc):
  - the data: every micro-batch's samples, tokens and images as Tandem's data library made them;
  - the loss: caption cross-entropy summed over the non-pad targets, divided by the target count of
    the whole global batch, accumulated over the step's micro-batches;
  - the optimizer: one torch.optim.AdamW per model with the group's lr, betas, eps and weight decay
    on every parameter; the lr of each update set from DeepSpeed's schedule formulas at the number
    of completed steps, as engine/lr_scheduler.cc does;
  - clipping: each group by its own norm (the engines' gradient_clipping), or both by the norm of
    the two together (schedule.gradient_clipping), with DeepSpeed's max_norm / (norm + 1e-6);
  - evaluation: greedy decoding as models::GenerateGreedy (no KV cache, argmax, stop when every row
    has produced <eos>), scored as data/caption_metrics.cc, on the same held-out samples in the same
    batches.
What differs, as plain PyTorch expresses the job's engine config: parameters, gradients and Adam
moments are fp32 (Tandem keeps the job's bf16 model states); the forward runs under
torch.autocast(bf16) exactly where Tandem's engine autocasts to bf16 on this machine, and in fp32
where it computes in fp32 (the dump records its choice); both models run as one autograd graph, as
a single-process PyTorch program does. Images are read from the dump, where Tandem renders them in
the step (the dump's "render" entry says what that costs).
"""

import argparse
import json
import math
import os
import statistics
import sys
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

INIT_STD = 0.02


# ---------------------------------------------------------------------------------------------
# Models (models/README.md; models/vision_encoder.cc, models/llm.cc, models/layers.cc)
# ---------------------------------------------------------------------------------------------


def init_linear(linear, std):
    with torch.no_grad():
        linear.weight.normal_(0.0, std)
        if linear.bias is not None:
            linear.bias.zero_()


def layer_norm_fp32(x, norm, eps):
    return F.layer_norm(x.float(), (x.shape[-1],), norm.weight.float(), norm.bias.float(), eps).to(x.dtype)


def sincos_positions_2d(grid, dim):
    quarter = dim // 4
    omega = torch.pow(10000.0, -torch.arange(quarter, dtype=torch.float64) / quarter)
    coords = torch.arange(grid, dtype=torch.float64)
    angles = torch.outer(coords, omega)
    axis = torch.cat([angles.sin(), angles.cos()], -1)  # [grid, dim/2]
    rows = axis.unsqueeze(1).expand(grid, grid, dim // 2)
    cols = axis.unsqueeze(0).expand(grid, grid, dim // 2)
    return torch.cat([rows, cols], -1).reshape(grid * grid, dim).float()


class VisionAttention(nn.Module):
    def __init__(self, hidden, heads):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(hidden, 3 * hidden)
        self.proj = nn.Linear(hidden, hidden)

    def forward(self, x):
        b, n, h = x.shape
        qkv = self.qkv(x).view(b, n, 3, self.heads, h // self.heads).permute(2, 0, 3, 1, 4)
        out = F.scaled_dot_product_attention(qkv[0], qkv[1], qkv[2], is_causal=False)
        return self.proj(out.transpose(1, 2).reshape(b, n, h))


class VisionMlp(nn.Module):
    def __init__(self, hidden, mlp_hidden):
        super().__init__()
        self.fc1 = nn.Linear(hidden, mlp_hidden)
        self.fc2 = nn.Linear(mlp_hidden, hidden)

    def forward(self, x):
        return self.fc2(F.gelu(self.fc1(x)))


class VisionBlock(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.eps = c["norm_eps"]
        self.norm1 = nn.LayerNorm(c["hidden"], eps=c["norm_eps"])
        self.attn = VisionAttention(c["hidden"], c["heads"])
        self.norm2 = nn.LayerNorm(c["hidden"], eps=c["norm_eps"])
        self.mlp = VisionMlp(c["hidden"], c["mlp_hidden"])
        residual_std = INIT_STD / math.sqrt(2.0 * c["layers"])
        init_linear(self.attn.qkv, INIT_STD)
        init_linear(self.attn.proj, residual_std)
        init_linear(self.mlp.fc1, INIT_STD)
        init_linear(self.mlp.fc2, residual_std)

    def forward(self, x):
        x = x + self.attn(layer_norm_fp32(x, self.norm1, self.eps))
        return x + self.mlp(layer_norm_fp32(x, self.norm2, self.eps))


class VisionEncoder(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c = c
        grid = c["image_size"] // c["patch_size"]
        if c["positions"] == "learned":
            self.positions = nn.Parameter(torch.empty(1, grid * grid, c["hidden"]))
            with torch.no_grad():
                self.positions.normal_(0.0, INIT_STD)
        else:
            self.register_buffer("positions", sincos_positions_2d(grid, c["hidden"]).unsqueeze(0))
        self.patch_embed = nn.Conv2d(c["channels"], c["hidden"], c["patch_size"], stride=c["patch_size"])
        with torch.no_grad():
            self.patch_embed.weight.normal_(0.0, INIT_STD)
            self.patch_embed.bias.zero_()
        self.blocks = nn.ModuleList([VisionBlock(c) for _ in range(c["layers"])])
        self.norm = nn.LayerNorm(c["hidden"], eps=c["norm_eps"])
        self.projector = nn.Linear(c["hidden"], c["output_dim"])
        init_linear(self.projector, INIT_STD)

    def forward(self, images):
        x = (images - 0.5) / 0.5
        x = self.patch_embed(x).flatten(2).transpose(1, 2)
        x = x + self.positions
        for block in self.blocks:
            x = block(x)
        return self.projector(layer_norm_fp32(x, self.norm, self.c["norm_eps"]))


class RmsNorm(nn.Module):
    def __init__(self, dim, eps):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        xf = x.float()
        normed = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * normed.to(x.dtype)


def rotary_tables(head_dim, max_seq_len, theta):
    inv_freq = torch.pow(theta, -torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim)
    freqs = torch.outer(torch.arange(max_seq_len, dtype=torch.float64), inv_freq)
    angles = torch.cat([freqs, freqs], -1)
    return angles.cos().float(), angles.sin().float()


def apply_rotary(x, cos, sin):
    half = x.shape[-1] // 2
    xf = x.float()
    rotated = torch.cat([-xf[..., half:], xf[..., :half]], -1)
    return (xf * cos + rotated * sin).to(x.dtype)


class LlmAttention(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.heads, self.kv_heads = c["heads"], c["kv_heads"]
        self.head_dim = c["hidden"] // c["heads"]
        h, d = c["hidden"], self.head_dim
        self.q = nn.Linear(h, self.heads * d, bias=False)
        self.k = nn.Linear(h, self.kv_heads * d, bias=False)
        self.v = nn.Linear(h, self.kv_heads * d, bias=False)
        self.o = nn.Linear(self.heads * d, h, bias=False)

    def forward(self, x, cos, sin):
        b, s, _ = x.shape
        d = self.head_dim
        q = self.q(x).view(b, s, self.heads, d).transpose(1, 2)
        k = self.k(x).view(b, s, self.kv_heads, d).transpose(1, 2)
        v = self.v(x).view(b, s, self.kv_heads, d).transpose(1, 2)
        q = apply_rotary(q, cos, sin)
        k = apply_rotary(k, cos, sin)
        if self.kv_heads != self.heads:
            repeat = self.heads // self.kv_heads
            k = k.unsqueeze(2).expand(b, self.kv_heads, repeat, s, d).reshape(b, self.heads, s, d)
            v = v.unsqueeze(2).expand(b, self.kv_heads, repeat, s, d).reshape(b, self.heads, s, d)
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.o(out.transpose(1, 2).reshape(b, s, self.heads * d))


class LlmMlp(nn.Module):
    def __init__(self, hidden, mlp_hidden):
        super().__init__()
        self.gate = nn.Linear(hidden, mlp_hidden, bias=False)
        self.up = nn.Linear(hidden, mlp_hidden, bias=False)
        self.down = nn.Linear(mlp_hidden, hidden, bias=False)

    def forward(self, x):
        return self.down(F.silu(self.gate(x)) * self.up(x))


class LlmBlock(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.attn_norm = RmsNorm(c["hidden"], c["norm_eps"])
        self.attn = LlmAttention(c)
        self.mlp_norm = RmsNorm(c["hidden"], c["norm_eps"])
        self.mlp = LlmMlp(c["hidden"], c["mlp_hidden"])
        residual_std = INIT_STD / math.sqrt(2.0 * c["layers"])
        for linear in (self.attn.q, self.attn.k, self.attn.v):
            init_linear(linear, INIT_STD)
        init_linear(self.attn.o, residual_std)
        init_linear(self.mlp.gate, INIT_STD)
        init_linear(self.mlp.up, INIT_STD)
        init_linear(self.mlp.down, residual_std)

    def forward(self, x, cos, sin):
        x = x + self.attn(self.attn_norm(x), cos, sin)
        return x + self.mlp(self.mlp_norm(x))


class Llm(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c = c
        self.embed = nn.Embedding(c["vocab_size"], c["hidden"])
        with torch.no_grad():
            self.embed.weight.normal_(0.0, INIT_STD)
        self.blocks = nn.ModuleList([LlmBlock(c) for _ in range(c["layers"])])
        self.norm = RmsNorm(c["hidden"], c["norm_eps"])
        self.head = None
        if not c["tie_embeddings"]:
            self.head = nn.Linear(c["hidden"], c["vocab_size"], bias=False)
            init_linear(self.head, INIT_STD)
        cos, sin = rotary_tables(c["hidden"] // c["heads"], c["max_seq_len"], c["rope_theta"])
        self.register_buffer("rope_cos", cos)
        self.register_buffer("rope_sin", sin)

    def forward(self, prefix, tokens):
        x = self.embed(tokens)
        patches = 0
        if prefix is not None:
            patches = prefix.shape[1]
            x = torch.cat([prefix.to(x.dtype), x], 1)
        seq = x.shape[1]
        cos, sin = self.rope_cos[:seq], self.rope_sin[:seq]
        for block in self.blocks:
            x = block(x, cos, sin)
        x = self.norm(x[:, patches:])
        return F.linear(x, self.embed.weight) if self.head is None else self.head(x)


def caption_loss_sum(logits, tokens, pad_id):
    vocab = logits.shape[-1]
    predictions = logits[:, :-1].reshape(-1, vocab).float()
    targets = tokens[:, 1:].reshape(-1)
    return F.cross_entropy(predictions, targets, reduction="sum", ignore_index=pad_id)


@torch.no_grad()
def generate_greedy(llm, prefix, bos_id, eos_id, max_new_tokens):
    batch, patches = prefix.shape[0], prefix.shape[1]
    steps = min(max_new_tokens, llm.c["max_seq_len"] - patches)
    generated = [[] for _ in range(batch)]
    done = [False] * batch
    remaining = batch
    tokens = torch.full((batch, 1), bos_id, dtype=torch.long)
    for _ in range(steps):
        if remaining == 0:
            break
        nxt = llm(prefix, tokens)[:, -1].argmax(-1)
        for b, token in enumerate(nxt.tolist()):
            if done[b]:
                continue
            if token == eos_id:
                done[b] = True
                remaining -= 1
            else:
                generated[b].append(token)
        tokens = torch.cat([tokens, nxt.unsqueeze(1)], 1)
    return generated


def score_captions(generated, reference, eos_id, score):
    """data/caption_metrics.cc Accumulate."""
    g = generated[: generated.index(eos_id)] if eos_id in generated else generated
    r = reference[: reference.index(eos_id)] if eos_id in reference else reference
    score["samples"] += 1
    score["exact"] += int(g == r)
    score["tokens_total"] += len(r) + 1
    score["tokens_correct"] += sum(int(a == b) for a, b in zip(g, r)) + int(len(g) == len(r))


# ---------------------------------------------------------------------------------------------
# Learning rate: DeepSpeed's lr_schedules.py as engine/lr_scheduler.cc computes it
# ---------------------------------------------------------------------------------------------


def learning_rate(s, base_lr, steps_taken):
    """The lr of the update that follows `steps_taken` completed optimizer steps."""
    if s["type"] == "none":
        return base_lr
    iteration = steps_taken - 1  # DeepSpeed's last_batch_iteration
    warmup = max(2, s["warmup_num_steps"])
    total = s["total_num_steps"]

    def warmup_gamma(i):
        if s["warmup_type"] == "linear":
            return i / warmup
        return (1.0 / math.log(warmup)) * math.log(i + 1)

    if s["type"] == "WarmupCosineLR":
        if iteration < 0:
            return 0.0
        if iteration < warmup:
            ratio = s["warmup_min_ratio"] + warmup_gamma(iteration) * (1.0 - s["warmup_min_ratio"])
        else:
            progress = min(1.0, (iteration - warmup + 1) / max(1, total - warmup))
            cosine = (1.0 + math.cos(math.pi * progress)) / 2.0
            ratio = max(0.0, s["cos_min_ratio"] + (1.0 - s["cos_min_ratio"]) * cosine)
        return base_lr * ratio
    if iteration < 0:
        return s["warmup_min_lr"]
    gamma = 1.0
    if iteration < warmup:
        gamma = warmup_gamma(iteration)
    elif s["type"] == "WarmupDecayLR":
        gamma = max(0.0, (total - iteration) / max(1.0, total - warmup))
    return s["warmup_min_lr"] + (s["warmup_max_lr"] - s["warmup_min_lr"]) * gamma


# ---------------------------------------------------------------------------------------------
# Training
# ---------------------------------------------------------------------------------------------


def load_dump(path):
    with open(os.path.join(path, "manifest.json")) as f:
        manifest = json.load(f)
    if manifest.get("format") != "tandem-dataset-dump" or manifest.get("version") != 1:
        sys.exit(f"{path}/manifest.json: not a tandem-dataset-dump version 1")
    arrays = {}
    for name in ("order", "train_indices", "train_images", "train_tokens", "train_lengths",
                 "eval_images", "eval_tokens", "eval_lengths"):
        file = os.path.join(path, name + ".npy")
        if os.path.exists(file):
            arrays[name] = np.load(file)
    return manifest, arrays


def compare_init(model, directory):
    """Max |difference| between the model's parameters and the dump's (Tandem's) initial ones."""
    worst, missing = 0.0, []
    for name, p in model.named_parameters():
        file = os.path.join(directory, name + ".npy")
        if not os.path.exists(file):
            missing.append(name)
            continue
        ref = torch.from_numpy(np.load(file))
        if ref.shape != p.shape:
            missing.append(name)
            continue
        worst = max(worst, (p.detach() - ref).abs().max().item())
    return worst, missing


def group_autocast(group):
    return torch.autocast("cpu", dtype=torch.bfloat16, enabled=compute_name(group) != "fp32")


def make_optimizer(model, group, adamw):
    o = group["optimizer"]
    if o["type"] == "Adam" and not o["adam_w_mode"]:
        cls = torch.optim.Adam  # classic Adam: L2 term added to the gradient
    else:
        cls = torch.optim.AdamW
    kwargs = {}
    if adamw == "fused":
        kwargs["fused"] = True
    elif adamw == "foreach":
        kwargs["foreach"] = True
    else:
        kwargs["foreach"] = False
    return cls(model.parameters(), lr=o["lr"], betas=tuple(o["betas"]), eps=o["eps"],
               weight_decay=o["weight_decay"], **kwargs)


def grad_norm(model):
    return torch.nn.utils.get_total_norm([p.grad for p in model.parameters() if p.grad is not None])


def clip(model, max_norm, norm):
    """Scales the gradients by max_norm / (norm + 1e-6) where that is below 1, as DeepSpeed."""
    torch.nn.utils.clip_grads_with_norm_(model.parameters(), max_norm, norm)


def compute_name(group):
    c = group["compute"]
    return "autocast bf16" if c["autocast"] or c["activation_dtype"] == "bf16" else "fp32"


def evaluate(manifest, arrays, vision, llm):
    tok = manifest["tokenizer"]
    images, tokens, lengths = arrays.get("eval_images"), arrays.get("eval_tokens"), arrays.get("eval_lengths")
    score = {"samples": 0, "exact": 0, "tokens_correct": 0, "tokens_total": 0}
    if images is None:
        return None
    batch = manifest["schedule"]["eval_batch"]
    vision.eval()
    llm.eval()
    with torch.no_grad():
        for begin in range(0, images.shape[0], batch):
            end = min(images.shape[0], begin + batch)
            with group_autocast(manifest["vision"]):
                prefix = vision(torch.from_numpy(images[begin:end]))
            with group_autocast(manifest["llm"]):
                generated = generate_greedy(llm, prefix, tok["bos"], tok["eos"], manifest["text_len"] - 1)
            for row in range(end - begin):
                length = int(lengths[begin + row])
                reference = tokens[begin + row, 1:length - 1].tolist()  # without <bos> and <eos>
                score_captions(generated[row], reference, tok["eos"], score)
    vision.train()
    llm.train()
    n = score["samples"]
    return {"caption_exact_match": score["exact"] / n if n else 0.0,
            "token_accuracy": score["tokens_correct"] / score["tokens_total"] if score["tokens_total"] else 0.0}


def train(args):
    torch.set_num_threads(args.threads)
    if args.sdpa == "math":
        torch.backends.cuda.enable_flash_sdp(False)  # these flags choose the CPU kernel too
        torch.backends.cuda.enable_mem_efficient_sdp(False)
    manifest, arrays = load_dump(args.dump)
    schedule = manifest["schedule"]
    vgroup, lgroup = manifest["vision"], manifest["llm"]
    tok = manifest["tokenizer"]

    torch.manual_seed(vgroup["seed"])
    vision = VisionEncoder(vgroup["model"])
    torch.manual_seed(lgroup["seed"])
    llm = Llm(lgroup["model"])
    init = {}
    for name, model in (("vision", vision), ("llm", llm)):
        directory = os.path.join(args.dump, "init_" + name)
        if os.path.isdir(directory):
            worst, missing = compare_init(model, directory)
            init[name] = {"max_abs_difference": worst, "unmatched": missing}

    vopt = make_optimizer(vision, vgroup, args.adamw)
    lopt = make_optimizer(llm, lgroup, args.adamw)
    whole_model_clip = schedule["gradient_clipping"]

    # Row of each dataset index in the dumped arrays.
    row_of = np.full(int(arrays["train_indices"].max()) + 1, -1, dtype=np.int64)
    row_of[arrays["train_indices"]] = np.arange(arrays["train_indices"].shape[0])
    images, tokens, lengths = arrays["train_images"], arrays["train_tokens"], arrays["train_lengths"]
    order = arrays["order"]

    os.makedirs(args.run_dir, exist_ok=False)
    metrics = open(os.path.join(args.run_dir, "metrics.jsonl"), "w")
    steps, global_batch = schedule["steps"], schedule["global_batch"]
    eval_every = schedule["eval_every"]
    train_seconds, samples, loss = 0.0, 0, float("nan")
    last_eval = None
    start = time.perf_counter()
    for step in range(1, steps + 1):
        step_start = time.perf_counter()
        rows = row_of[order[step - 1]]  # [micro_batches, micro]
        global_targets = int((lengths[rows] - 1).sum())
        for opt, group in ((vopt, vgroup), (lopt, lgroup)):
            lr = learning_rate(group["scheduler"], group["optimizer"]["lr"], step - 1)
            for g in opt.param_groups:
                g["lr"] = lr
        step_loss = 0.0
        for k in range(rows.shape[0]):
            mb_images = torch.from_numpy(images[rows[k]])
            mb_tokens = torch.from_numpy(tokens[rows[k]])
            with group_autocast(vgroup):
                embeddings = vision(mb_images)
            with group_autocast(lgroup):
                logits = llm(embeddings, mb_tokens)
            loss = caption_loss_sum(logits, mb_tokens, tok["pad"]) / global_targets
            loss.backward()
            step_loss += loss.item()
        # Clipping, then the updates.
        vnorm, lnorm = grad_norm(vision), grad_norm(llm)
        skip = False
        if whole_model_clip > 0:
            total = torch.hypot(vnorm, lnorm)
            skip = not math.isfinite(total.item())  # DeepSpeed skips the step
            if not skip:
                clip(vision, whole_model_clip, total)
                clip(llm, whole_model_clip, total)
        else:
            for model, group, norm in ((vision, vgroup, vnorm), (llm, lgroup, lnorm)):
                if group["gradient_clipping"] > 0:
                    clip(model, group["gradient_clipping"], norm)
        if not skip:
            vopt.step()
            lopt.step()
        vopt.zero_grad(set_to_none=True)
        lopt.zero_grad(set_to_none=True)
        step_seconds = time.perf_counter() - step_start
        train_seconds += step_seconds
        samples += global_batch
        if not math.isfinite(step_loss):
            sys.exit(f"loss is {step_loss} at step {step}: training diverged")
        record = {"step": step, "loss": step_loss, "lr": lopt.param_groups[0]["lr"],
                  "vision_lr": vopt.param_groups[0]["lr"],
                  "grad_norm": math.hypot(vnorm.item(), lnorm.item()),
                  "vision_grad_norm": vnorm.item(), "llm_grad_norm": lnorm.item(),
                  "samples_per_s": global_batch / max(step_seconds, 1e-9),
                  "elapsed_s": time.perf_counter() - start}
        metrics.write(json.dumps(record) + "\n")
        loss = step_loss
        if (eval_every > 0 and step % eval_every == 0) or step == steps:
            result = evaluate(manifest, arrays, vision, llm)
            if result is not None:
                last_eval = result
                metrics.write(json.dumps({"eval": {"step": step, **result}}) + "\n")
                metrics.flush()
                print(f"step {step}: loss {step_loss:.4f}, held-out caption exact match "
                      f"{result['caption_exact_match']:.3f}, {samples / train_seconds:.0f} samples/s",
                      file=sys.stderr, flush=True)
    metrics.close()
    summary = {"job": manifest["job"], "run_dir": args.run_dir, "steps": steps, "samples": samples,
               "final_loss": loss, "elapsed_s": time.perf_counter() - start,
               "samples_per_s": samples / max(train_seconds, 1e-9),
               "vision_parameters": sum(p.numel() for p in vision.parameters()),
               "llm_parameters": sum(p.numel() for p in llm.parameters()),
               "vocab_size": len(tok["words"]),
               "torch": torch.__version__, "threads": torch.get_num_threads(), "adamw": args.adamw,
               "sdpa": args.sdpa,
               "compute": {"vision": compute_name(vgroup), "llm": compute_name(lgroup)},
               "initial_weights_vs_tandem": init}
    if last_eval is not None:
        summary.update(last_eval)
    with open(os.path.join(args.run_dir, "summary.json"), "w") as f:
        json.dump(summary, f, indent=2)
        f.write("\n")


# ---------------------------------------------------------------------------------------------
# Report
# ---------------------------------------------------------------------------------------------


def read_run(directory):
    steps, evals = {}, {}
    with open(os.path.join(directory, "metrics.jsonl")) as f:
        for line in f:
            record = json.loads(line)
            if "eval" in record:
                evals[record["eval"]["step"]] = record["eval"]
            else:
                steps[record["step"]] = record
    with open(os.path.join(directory, "summary.json")) as f:
        summary = json.load(f)
    return steps, evals, summary


def report(args):
    with open(os.path.join(args.dump, "manifest.json")) as f:
        manifest = json.load(f)
    runs = [("PyTorch", args.pytorch), ("tandem --colocated", args.colocated), ("tandem run", args.run)]
    data = [read_run(d) for _, d in runs]
    eval_steps = sorted(set().union(*[set(e.keys()) for _, e, _ in data]))

    def cell(run, step):
        steps, evals, _ = run
        e = evals.get(step)
        if e is None:
            return "-"
        elapsed = steps[step]["elapsed_s"] if step in steps else float("nan")
        return f"{100 * e['caption_exact_match']:.1f}% ({elapsed:.0f}s)"

    print("held-out caption exact match at each evaluation (wall clock since the first step):\n")
    print("| step | " + " | ".join(name for name, _ in runs) + " |")
    print("| --- |" + " --- |" * len(runs))
    for step in eval_steps:
        print(f"| {step} | " + " | ".join(cell(run, step) for run in data) + " |")

    def median_rate(run):
        """Samples/s of the median step after a warm-up of 20 steps (or of all but the first)."""
        rates = [r["samples_per_s"] for step, r in sorted(run[0].items())]
        rates = rates[20:] if len(rates) > 40 else rates[1:]
        return statistics.median(rates) if rates else float("nan")

    base = data[0][2]["samples_per_s"]
    base_median = median_rate(data[0])
    print("\nthroughput: samples / seconds spent in training steps (summary.json: evaluation and "
          "checkpoints excluded), and the rate of the median step after 20 warm-up steps:\n")
    print("| run | samples/s | / PyTorch | median step, samples/s | / PyTorch | final loss | "
          "exact match | token accuracy | wall clock |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for (name, _), run in zip(runs, data):
        summary = run[2]
        rate, median = summary["samples_per_s"], median_rate(run)
        print(f"| {name} | {rate:.0f} | **{rate / base:.2f}** | {median:.0f} | {median / base_median:.2f} | "
              f"{summary['final_loss']:.4f} | {100 * summary.get('caption_exact_match', 0):.1f}% | "
              f"{100 * summary.get('token_accuracy', 0):.2f}% | {summary['elapsed_s']:.0f}s |")
    py = data[0][2]
    v, l = manifest["vision"], manifest["llm"]
    print(f"\njob {manifest['job']}: {manifest['schedule']['steps']} steps of "
          f"{manifest['schedule']['global_batch']} samples, vision {py['vision_parameters']} and llm "
          f"{py['llm_parameters']} parameters")
    print(f"Tandem's compute: vision {v['compute']['reason']}; llm {l['compute']['reason']}")
    print(f"PyTorch {py['torch']}: vision {py['compute']['vision']}, llm {py['compute']['llm']}, fp32 "
          f"parameters, AdamW ({py['adamw']}), attention backend {py.get('sdpa', 'default')}, "
          f"{py['threads']} threads")
    init = py.get("initial_weights_vs_tandem", {})
    if init:
        print("PyTorch's initial weights against Tandem's: " + ", ".join(
            f"{name} max |diff| {r['max_abs_difference']:.3g}" for name, r in init.items()))
    cores = os.cpu_count()
    actors = v["actors"] + l["actors"]
    cpu = "unknown CPU"
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    print(f"machine: {cpu}, {cores} cores ({manifest['cpu_bf16']}); threads: PyTorch {py['threads']}, "
          f"--colocated {cores} (its default: all cores), tandem run {max(1, cores // actors)} in each of "
          f"{actors} actor processes (its default: cores / actors)"
          + (f"; load average before / after: {args.load}" if args.load else ""))
    render = manifest["render"]
    print(f"Tandem renders each step's images in the step: {render['us_per_sample']:.1f} us per sample here "
          f"({render['us_per_sample'] * manifest['schedule']['global_batch'] / 1000:.2f} ms per step); "
          f"PyTorch reads them from the dump")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    t = sub.add_parser("train", help="train on a dump, write a run directory")
    t.add_argument("dump")
    t.add_argument("--run-dir", required=True)
    t.add_argument("--threads", type=int, default=os.cpu_count())
    t.add_argument("--adamw", choices=["fused", "foreach", "for-loop"], default="fused",
                   help="torch.optim.AdamW implementation (default: fused)")
    t.add_argument("--sdpa", choices=["default", "math"], default="default",
                   help="scaled_dot_product_attention backend: PyTorch's choice, or the math one")
    r = sub.add_parser("report", help="print the comparison table")
    r.add_argument("dump")
    r.add_argument("pytorch")
    r.add_argument("colocated")
    r.add_argument("run")
    r.add_argument("--load", default="", help="the load averages to print with the machine")
    args = parser.parse_args()
    if args.command == "train":
        train(args)
    else:
        report(args)


if __name__ == "__main__":
    main()
