#include "step/step_common.h"

#include <torch/torch.h>

#include <cstring>
#include <filesystem>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "engine/compute.h"
#include "engine/engine.h"
#include "engine_config/param_groups.h"
#include "nlohmann/json.hpp"

namespace tandem::step {

absl::Status FreezeParameters(torch::nn::Module& model, const std::vector<std::string>& freeze,
                              std::string_view group) {
  if (freeze.empty()) return absl::OkStatus();
  const std::string group_name(group);
  std::vector<bool> used(freeze.size(), false);
  int64_t trainable = 0;
  std::string first_name;
  for (auto& item : model.named_parameters(/*recurse=*/true)) {
    if (first_name.empty()) first_name = item.key();
    bool frozen = false;
    for (size_t i = 0; i < freeze.size(); ++i) {
      if (engine_config::MatchesNamePattern(freeze[i], item.key())) {
        used[i] = true;
        frozen = true;
      }
    }
    if (frozen) {
      item.value().set_requires_grad(false);
    } else if (item.value().requires_grad()) {
      ++trainable;
    }
  }
  for (size_t i = 0; i < freeze.size(); ++i) {
    if (used[i]) continue;
    return absl::InvalidArgumentError(absl::StrCat(
        group_name, ".freeze[", i, "]: \"", freeze[i], "\" matches no parameter of the ",
        group_name, " model (names as in models/README.md, e.g. ", first_name, ")"));
  }
  if (trainable == 0 && !jobspec::FreezesWholeGroup(freeze)) {
    return absl::InvalidArgumentError(
        absl::StrCat(group_name, ".freeze: freezes every parameter of the ", group_name,
                     " model; write [\"*\"] to freeze the whole group, so the other group knows"));
  }
  return absl::OkStatus();
}

absl::StatusOr<engine_config::Config> GroupEngineConfig(const std::string& engine_json,
                                                        std::string_view prefix,
                                                        const jobspec::ScheduleConfig& schedule,
                                                        int world) {
  nlohmann::json json = nlohmann::json::parse(engine_json, nullptr, /*allow_exceptions=*/false);
  if (json.is_discarded()) {
    return absl::InvalidArgumentError(absl::StrCat(std::string(prefix), ": not valid JSON"));
  }
  ASSIGN_OR_RETURN(engine_config::Config config, engine_config::ParseConfigJson(json, prefix));
  const int64_t micro = schedule.global_batch / schedule.micro_batches;
  config.train_batch_size = schedule.global_batch;
  config.train_micro_batch_size_per_gpu = std::max<int64_t>(1, micro / world);
  config.gradient_accumulation_steps = schedule.micro_batches;
  config.gradient_accumulation_steps_given = true;
  config.gradient_reduction = engine_config::GradientReduction::kSum;
  if (!config.seed) config.seed = schedule.seed;
  // Whole-model clipping: the engine clips by the combined norm its GradNormCombiner returns.
  if (schedule.gradient_clipping > 0) config.gradient_clipping = schedule.gradient_clipping;
  return config;
}

uint64_t VisionModelSeed(uint64_t job_seed) { return job_seed; }
uint64_t LlmModelSeed(uint64_t job_seed) { return job_seed ^ 0x9E3779B97F4A7C15ull; }

at::ScalarType EmbeddingScalarType(const engine_config::Config& vision_config,
                                   const c10::Device& device) {
  return engine::PlanCompute(vision_config, device).output_dtype;
}

at::Tensor ImagesOf(const data::Batch& batch, bool pinned) {
  const int64_t s = batch.image_size;
  at::Tensor images =
      at::empty({batch.size, 3, s, s}, at::TensorOptions().dtype(at::kFloat).pinned_memory(pinned));
  std::memcpy(images.data_ptr<float>(), batch.images.data(), batch.images.size() * sizeof(float));
  return images;
}

TokenTensors TokensOf(data::TokenBatch& batch) {
  TokenTensors out;
  out.tokens = torch::from_blob(batch.tokens.data(), {batch.size, batch.length}, at::kLong).clone();
  out.labels = torch::from_blob(batch.labels.data(), {batch.size, batch.length}, at::kLong).clone();
  out.targets = batch.targets;
  return out;
}

std::map<std::string, std::string> CheckpointClientState(int64_t step,
                                                         const data::Sampler::Position& position) {
  return {{"step", std::to_string(step)},
          {"data_epoch", std::to_string(position.epoch)},
          {"data_offset", std::to_string(position.offset)}};
}

absl::StatusOr<ResumePoint> ParseCheckpointClientState(
    const std::map<std::string, std::string>& state, const std::string& where) {
  auto number = [&](const char* key, int64_t* out) -> absl::Status {
    auto it = state.find(key);
    if (it == state.end() || !absl::SimpleAtoi(it->second, out) || *out < 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          where, ": the checkpoint's '", key, "' is ",
          it == state.end() ? "absent" : "'" + it->second + "'", "; want a number >= 0"));
    }
    return absl::OkStatus();
  };
  ResumePoint point;
  RETURN_IF_ERROR(number("step", &point.step));
  RETURN_IF_ERROR(number("data_epoch", &point.position.epoch));
  RETURN_IF_ERROR(number("data_offset", &point.position.offset));
  return point;
}

absl::StatusOr<ResumePoint> LoadGroupCheckpoint(engine::Engine& engine,
                                                const std::string& checkpoint,
                                                const std::string& group) {
  const std::string directory = (std::filesystem::path(checkpoint) / group).string();
  ASSIGN_OR_RETURN(auto state, engine.LoadCheckpoint(directory));
  return ParseCheckpointClientState(state, directory);
}

}  // namespace tandem::step
