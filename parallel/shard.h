// How one parameter of a tensor-parallel model is split over the group: the rank holds elements
// [range.begin, range.end) of dimension `dim` of a full dimension of `full` elements; dim -1 means
// the parameter is replicated (every rank holds all of it). Checkpoints and pretrained weights map
// full tensors to shards with TakeShard.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>

#include "parallel/parallel_group.h"

namespace tandem::parallel {

struct Shard {
  int dim = -1;
  int64_t full = 0;
  Range range;
  bool split() const { return dim >= 0; }
};

// The rank's part of `full` (a copy, contiguous); `full` itself when the shard is replicated.
// Throws c10::Error when `full` does not have the shard's full size along its dimension.
inline at::Tensor TakeShard(const at::Tensor& full, const Shard& shard) {
  if (!shard.split()) return full;
  TORCH_CHECK(full.dim() > shard.dim && full.size(shard.dim) == shard.full,
              "TakeShard: a tensor of ", full.sizes(), " is not split ", shard.full,
              " along dimension ", shard.dim);
  return full.narrow(shard.dim, shard.range.begin, shard.range.size()).contiguous();
}

}  // namespace tandem::parallel
