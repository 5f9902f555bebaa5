"""FLOPs of one training sample of a LLaVA-style model, for model FLOPs utilisation (MFU).

Counted as PaLM's appendix B and Megatron count them: every matrix multiply is 2 * m * n * k FLOPs
forward and twice that backward (training = 3x forward); recomputation is not counted; element-wise
work (norms, activations, softmax, the optimizer) is not counted. Attention's two products (q k^T and
p v) are counted at full size for the vision tower (it attends both ways) and at half for the LLM
(causal: FlashAttention skips the masked half). The LLM's head is counted on `head_rows` positions a
sample: those whose next token is a target, where both Tandem and the PyTorch reference compute
logits (every text position when not given).
"""


def vision_forward_flops(image_size, patch_size, channels, hidden, layers, mlp, llm_hidden):
    tokens = (image_size // patch_size) ** 2
    patch = 2 * tokens * channels * patch_size * patch_size * hidden
    per_layer = (2 * tokens * hidden * 3 * hidden      # q, k, v
                 + 2 * tokens * hidden * hidden        # o
                 + 2 * 2 * tokens * hidden * mlp       # fc1, fc2
                 + 2 * 2 * tokens * tokens * hidden)   # q k^T, p v (both ways)
    projector = 2 * tokens * (hidden * llm_hidden + llm_hidden * llm_hidden)
    return patch + layers * per_layer + projector


def llm_forward_flops(positions, text_tokens, hidden, layers, heads, kv_heads, mlp, vocab):
    head_dim = hidden // heads
    kv = kv_heads * head_dim
    per_layer = (2 * positions * hidden * hidden            # q
                 + 2 * 2 * positions * hidden * kv          # k, v
                 + 2 * positions * hidden * hidden          # o
                 + 3 * 2 * positions * hidden * mlp         # gate, up, down
                 + 2 * positions * positions * hidden)      # q k^T and p v, causal half
    head = 2 * text_tokens * hidden * vocab
    return layers * per_layer + head


def training_flops_per_sample(shape, head_rows=None):
    """`shape`: the dict bench/gpu/make_llava.py writes as shape.json; `head_rows`: the positions a
    sample the head is applied to (default: every text position)."""
    v, l = shape["vision"], shape["llm"]
    image_tokens = (v["image_size"] // v["patch_size"]) ** 2
    positions = image_tokens + shape["text_tokens"]
    forward = (vision_forward_flops(v["image_size"], v["patch_size"], 3, v["hidden"], v["layers"],
                                    v["mlp"], l["hidden"])
               + llm_forward_flops(positions, shape["text_tokens"] if head_rows is None else head_rows,
                                   l["hidden"], l["layers"],
                                   l["heads"], l["kv_heads"], l["mlp"], l["vocab"]))
    return 3 * forward
