// The parameters of the two models (models/vision_encoder.h, models/llm.h) by name and shape,
// worked out from their sizes without building them: what a job's memory estimate counts
// (jobspec/memory_estimate.h) at submit, where no model can be built. Plain C++, no LibTorch: the
// models' tests hold these lists equal to the built modules' named_parameters().
//
//   for (const models::ParameterInfo& p : models::LlmParameterList(config)) total += p.numel();
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "models/model_config.h"

namespace tandem::models {

struct ParameterInfo {
  std::string name;            // as named_parameters() lists it: "blocks.3.attn.q.weight"
  std::vector<int64_t> shape;  // the whole parameter, not a tensor-parallel shard
  bool frozen = false;         // built without a gradient: vision blocks after the feature layer,
                               // a tower's post_norm and pooling head
  bool in_block = false;       // inside blocks.N: at ZeRO-3 a block's parameters are one unit

  int64_t numel() const;
};

// In named_parameters() order. REQUIRES: sizes a validated spec or config allows.
std::vector<ParameterInfo> VisionParameterList(const VisionConfig& config);
std::vector<ParameterInfo> LlmParameterList(const LlmConfig& config);

// How a tensor-parallel group of `size` ranks splits the LLM parameter `name` (NOTE
// [Tensor-parallel LLM] in models/llm.h): along dimension `dim`, of `full` elements there, as
// parallel::EvenSplit; dim -1: every rank holds all of it. models::LlmParameterShard applies it.
struct TensorSplit {
  int dim = -1;
  int64_t full = 0;
};
TensorSplit LlmParameterSplit(const LlmConfig& config, std::string_view name, int size);

// The elements of `parameter` that rank `rank` of `size` holds: with an uneven split the first
// full % size ranks hold one row or column more.
int64_t LlmShardElements(const LlmConfig& config, const ParameterInfo& parameter, int size,
                         int rank);

}  // namespace tandem::models
