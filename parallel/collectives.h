// The collectives of tensor and sequence parallelism as autograd functions (Megatron-LM's
// mappings.py, DeepSpeed-Ulysses' _SeqAllToAll), over a ParallelGroup. LibTorch's C++ API has no
// differentiable collectives, so each is a torch::autograd::Function whose backward issues the
// transposed collective.
//
// Errors: a collective that fails or passes its group's deadline throws c10::Error naming the
// group, the rank, the operation and its sequence number (from the communicator's status); in
// backward the error propagates out of backward().
//
// REQUIRES: the group's communicator outlives every autograd graph built through these functions
// (the graph keeps a pointer to it). Every rank of the group calls the same functions in the same
// order on tensors of the same shapes and dtype (fp32 or bf16).
#pragma once

#include <ATen/ATen.h>

#include "parallel/parallel_group.h"

namespace tandem::parallel {

// Forward: the identity. Backward: the gradient summed over the group. Goes before a
// column-parallel linear: the ranks' partial input gradients add up to the whole one.
at::Tensor CopyToGroup(const at::Tensor& x, const ParallelGroup& group);

// Forward: x summed over the group. Backward: the identity. Goes after a row-parallel linear and
// a vocabulary-parallel embedding.
at::Tensor ReduceFromGroup(const at::Tensor& x, const ParallelGroup& group);

// DeepSpeed-Ulysses. x [B, S / G, H, D] holds this rank's slice of the sequence (rank r: positions
// [r S/G, (r+1) S/G)) with every head; returns [B, S, H / G, D]: the whole sequence, heads
// [r H/G, (r+1) H/G). Backward: HeadsToSequence. REQUIRES: H divisible by the group's size.
at::Tensor SequenceToHeads(const at::Tensor& x, const ParallelGroup& group);
// The inverse: [B, S, H / G, D] -> [B, S / G, H, D]. REQUIRES: S divisible by the group's size.
at::Tensor HeadsToSequence(const at::Tensor& x, const ParallelGroup& group);

// Not differentiable (generation): x [..., n_r] holds columns [begin_r, end_r) of a last dimension
// of `total`, split as EvenSplit(total, G, r); returns [..., total] on every rank.
at::Tensor GatherLastDim(const at::Tensor& x, int64_t total, const ParallelGroup& group);

// Waits for `work` within the group's deadline; throws c10::Error with its status otherwise.
void WaitOrThrow(const std::shared_ptr<engine::Work>& work, const ParallelGroup& group);

}  // namespace tandem::parallel
