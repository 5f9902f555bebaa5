// The vocabulary split over a tensor-parallel group (Megatron-LM's VocabParallelEmbedding and
// vocab_parallel_cross_entropy): rank r holds rows EvenSplit(V, G, r) of the embedding and of the
// LM head, so its logits are the columns of its rows, and the loss never gathers whole logits.
//
// Errors: throws c10::Error for inconsistent shapes, and as collectives.h for a failed collective.
#pragma once

#include <ATen/ATen.h>

#include "parallel/parallel_group.h"

namespace tandem::parallel {

// The embeddings of `tokens` (ids in [0, V)) where this rank holds rows [rows.begin, rows.end) of
// the table in `weight` [rows.size(), hidden]: each rank looks up the ids it holds, zeros the
// others, and the sum over the group is the whole lookup. Differentiable w.r.t. `weight`.
at::Tensor VocabParallelEmbedding(const at::Tensor& weight, const at::Tensor& tokens,
                                  const Range& rows, const ParallelGroup& group);

// The summed cross-entropy of N rows: logits [N, columns.size()] are this rank's columns of the
// whole vocabulary's logits, targets [N] int64 ids in [0, V) (no ignored label: select the rows
// first). Computed in fp32 from the local columns with one all-gather (the rows' maxima) and one
// all-reduce (the sums of exponentials and the target logits); the same value on every rank.
// Backward: softmax minus one-hot on the local columns, no communication. With no group it is
// cross_entropy(logits, targets, reduction = sum).
at::Tensor VocabParallelCrossEntropySum(const at::Tensor& logits, const at::Tensor& targets,
                                        const Range& columns, const ParallelGroup& group);

}  // namespace tandem::parallel
