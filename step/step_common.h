// What the colocated trainer and the actors share, so both run exactly the step of docs/design.md
// §2 and a disaggregated run reproduces the colocated losses: each group's engine config, model
// seeds, the batch-to-tensor conversion and the dtype embeddings cross in. LibTorch header (torch
// code only).
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "data/batch.h"
#include "data/sampler.h"
#include "engine_config/config.h"
#include "jobspec/job_config.h"

namespace tandem::engine {
class Engine;
}  // namespace tandem::engine
namespace torch::nn {
class Module;
}  // namespace torch::nn

namespace tandem::step {

// The group's engine config with the schedule's batch arithmetic filled in (the job-spec parser has
// already rejected contradictions) and sum reduction: the trainer normalises the loss over the
// global batch itself. `world` is the group's size. Errors name `prefix` ("vision.engine.").
absl::StatusOr<engine_config::Config> GroupEngineConfig(const std::string& engine_json,
                                                        std::string_view prefix,
                                                        const jobspec::ScheduleConfig& schedule,
                                                        int world);

// Sets requires_grad false on every parameter of `model` whose name matches a pattern of `freeze`
// (the group's `freeze` list; engine_config/param_groups.h's MatchesNamePattern). InvalidArgument
// naming "<group>.freeze[i]" for a pattern that matches no parameter, and "<group>.freeze" for a
// list that freezes every parameter without "*" (the other group could not tell).
absl::Status FreezeParameters(torch::nn::Module& model, const std::vector<std::string>& freeze,
                              std::string_view group);

// torch::manual_seed values before building each model: every process that builds a group's model
// (the colocated trainer, each rank of the group) starts from the same initial weights.
uint64_t VisionModelSeed(uint64_t job_seed);
uint64_t LlmModelSeed(uint64_t job_seed);

// The dtype the vision group's output embeddings come out in under its engine config on `device`
// (engine::ComputePlan::output_dtype: the autocast dtype under autocast, else the compute dtype).
// The LLM ranks preallocate what they receive in it; both groups decide it on their own device,
// so torch_autocast.dtype "auto" needs the two groups' devices to agree on native bf16 (one host,
// or pools of one GPU generation); where they do not, the first transfer is refused naming both
// dtypes, and naming the dtype in the spec resolves it.
at::ScalarType EmbeddingScalarType(const engine_config::Config& vision_config,
                                   const c10::Device& device);

// A micro-batch's images [b, 3, H, W] (data::MakeImagesBatch; REQUIRES: b >= 1), in page-locked
// memory with `pinned` (a CUDA LibTorch; copies from it to a GPU need not wait).
at::Tensor ImagesOf(const data::Batch& batch, bool pinned = false);

// A micro-batch's tokens and labels [b, T] int64 (data::MakeTokenBatch), and its targets.
struct TokenTensors {
  at::Tensor tokens;
  at::Tensor labels;
  int64_t targets = 0;
};
TokenTensors TokensOf(data::TokenBatch& batch);

// What every engine checkpoint of a job stores beside its shard: the step and the data position, so
// a resumed run draws the samples an uninterrupted one would.
std::map<std::string, std::string> CheckpointClientState(int64_t step,
                                                         const data::Sampler::Position& position);

// What CheckpointClientState stored. InvalidArgument naming `where` and the key when one is absent
// or not a number >= 0.
struct ResumePoint {
  int64_t step = 0;
  data::Sampler::Position position;
};
absl::StatusOr<ResumePoint> ParseCheckpointClientState(
    const std::map<std::string, std::string>& state, const std::string& where);

// Loads the group's shards <checkpoint>/<group> into `engine` (re-partitioned when another group
// size or ZeRO stage wrote them; collective: every rank of the group calls it) and returns where
// the step count and the data order resume.
absl::StatusOr<ResumePoint> LoadGroupCheckpoint(engine::Engine& engine,
                                                const std::string& checkpoint,
                                                const std::string& group);

}  // namespace tandem::step
