// Resuming an LLM checkpoint at another tensor-parallel degree (docs/parallelism.md). A checkpoint
// of a tensor-parallel LLM group holds one engine checkpoint per tensor index,
// <checkpoint>/llm/tensor-<i>-of-<T>/ (each its replicas' ZeRO shards); at T = 1 it is
// <checkpoint>/llm/ itself. ReshardLlmCheckpoint assembles, one optimizer tensor at a time
// (weights, master, moments, compensation), the whole model's values out of the saved indices and
// cuts this rank's shards for degree `size`, index `index` (models::LlmParameterShard), into an
// engine checkpoint of one rank at ZeRO stage 0 in `scratch`. Engine::LoadCheckpoint then
// re-partitions it over the engine's group, as it does across world sizes and stages. The step
// counts, data position and RNG state are index 0's. Memory: the whole model's values of one
// optimizer tensor at a time. LibTorch header.
#pragma once

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "models/model_config.h"

namespace tandem::step {

// The tensor-parallel degree <checkpoint>/llm was saved at: 1 when it is an engine checkpoint
// itself, T when it holds tensor-<i>-of-<T>/ directories. FailedPrecondition when it is neither.
absl::StatusOr<int> SavedTensorParallelDegree(const std::string& checkpoint);

// Where, relative to a checkpoint, the LLM group's tensor index `index` of `degree` saves its
// engine checkpoint: "llm" at degree 1, else "llm/tensor-<index>-of-<degree>".
std::string LlmCheckpointDirectory(int degree, int index);

// Writes into `scratch` (an empty directory) the checkpoint of tensor index `index` of `size` cut
// from <checkpoint>/llm saved at another degree. FailedPrecondition for a missing or incomplete
// index, or indices saved at different steps; InvalidArgument for a shard that does not hold what
// its metadata says.
absl::Status ReshardLlmCheckpoint(const std::string& checkpoint, const models::LlmConfig& config,
                                  int size, int index, const std::string& scratch);

}  // namespace tandem::step
