// Engine::SaveCheckpoint / LoadCheckpoint.
//
// A checkpoint directory holds one shard per rank, "rank_<r>_of_<w>.safetensors", with this rank's
// optimizer domain (NOTE [Units] in layout.h): "weights" (param dtype), "master", "exp_avg",
// "exp_avg_sq", "compensation" (those present), "rng_state" (the CPU generator), and metadata (step
// counts, stage, precision, layout sizes, and the caller's client state under "client."). Each shard is
// written atomically (temp, fsync, rename). After a barrier, rank 0 writes the "complete" marker last:
// a directory without it is an interrupted save and is refused by LoadCheckpoint.
#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include <cstring>
#include <filesystem>
#include <mutex>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/atomic_file.h"
#include "common/status_macros.h"
#include "engine/engine.h"
#include "engine/safetensors.h"
#include "nlohmann/json.hpp"

namespace tandem::engine {
namespace {

constexpr char kCompleteMarker[] = "complete";
constexpr char kClientPrefix[] = "client.";

std::string ShardName(int rank, int world) {
  return absl::StrCat("rank_", rank, "_of_", world, ".safetensors");
}

std::string PrecisionName(const Config& config) {
  if (!config.bf16_enabled) return "fp32";
  return absl::StrCat("bf16", config.bf16_master_weights_and_grads ? "+bf16_master" : "+fp32_master",
                      config.bf16_optimizer_states ? "+bf16_states" : "+fp32_states");
}

// The "__metadata__" map of a safetensors file's header.
absl::StatusOr<std::map<std::string, std::string>> ReadShardMetadata(const std::string& path) {
  ASSIGN_OR_RETURN(std::string bytes, ReadFile(path));
  uint64_t header_size = 0;
  if (bytes.size() < sizeof(header_size)) {
    return absl::InvalidArgumentError(absl::StrCat("checkpoint: ", path, ": truncated"));
  }
  std::memcpy(&header_size, bytes.data(), sizeof(header_size));
  if (header_size > bytes.size() - sizeof(header_size)) {
    return absl::InvalidArgumentError(absl::StrCat("checkpoint: ", path, ": bad header length"));
  }
  auto header = nlohmann::json::parse(bytes.substr(sizeof(header_size), header_size), nullptr,
                                      /*allow_exceptions=*/false);
  if (!header.is_object() || !header.contains("__metadata__") ||
      !header["__metadata__"].is_object()) {
    return absl::InvalidArgumentError(absl::StrCat("checkpoint: ", path, ": no metadata"));
  }
  std::map<std::string, std::string> metadata;
  for (const auto& [key, value] : header["__metadata__"].items()) {
    if (value.is_string()) metadata[key] = value.get<std::string>();
  }
  return metadata;
}

}  // namespace

absl::Status Engine::SaveCheckpoint(const std::string& directory,
                                    const std::map<std::string, std::string>& client_state) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (in_backward_) return absl::FailedPreconditionError("checkpoint: called during backward");
    if (!error_.ok()) return error_;
  }
  if (micro_steps_ % config_.gradient_accumulation_steps != 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "checkpoint: ", directory, ": save at an accumulation boundary (micro step ", micro_steps_,
        " is inside a step of ", config_.gradient_accumulation_steps, " micro-batches)"));
  }
  std::error_code ec;
  std::filesystem::create_directories(directory, ec);
  if (ec) return absl::InternalError(absl::StrCat("checkpoint: cannot create ", directory, ": ", ec.message()));

  NamedTensors tensors;
  try {
    std::vector<at::Tensor> weights;
    for (size_t u = 0; u < layout_.units().size(); ++u) weights.push_back(UnitWeights(u));
    tensors.emplace_back("weights", at::cat(weights).cpu());
    if (master_.defined()) tensors.emplace_back("master", master_.cpu());
    tensors.emplace_back("exp_avg", exp_avg_.cpu());
    tensors.emplace_back("exp_avg_sq", exp_avg_sq_.cpu());
    if (compensation_.defined()) tensors.emplace_back("compensation", compensation_.cpu());
    auto generator = at::detail::getDefaultCPUGenerator();
    {
      std::lock_guard<std::mutex> lock(generator.mutex());
      tensors.emplace_back("rng_state", generator.get_state());
    }
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("checkpoint: ", directory, ": ", e.what()));
  }
  std::map<std::string, std::string> metadata = {
      {"global_steps", std::to_string(global_steps_)},
      {"micro_steps", std::to_string(micro_steps_)},
      {"skipped_steps", std::to_string(skipped_steps_)},
      {"zero_stage", std::to_string(config_.zero.stage)},
      {"world_size", std::to_string(world_size())},
      {"precision", PrecisionName(config_)},
      {"num_parameters", std::to_string(layout_.num_elements())},
      {"domain_elements", std::to_string(domain_elements_)},
  };
  for (const auto& [key, value] : client_state) metadata[kClientPrefix + key] = value;
  const std::string shard = directory + "/" + ShardName(rank(), world_size());
  RETURN_IF_ERROR(WriteSafetensors(shard, tensors, metadata));
  RETURN_IF_ERROR(Wait(communicator_->Barrier()));
  if (rank() == 0) {
    RETURN_IF_ERROR(WriteFileAtomically(
        directory + "/" + kCompleteMarker,
        absl::StrCat("{\"global_steps\": ", global_steps_, ", \"world_size\": ", world_size(),
                     ", \"zero_stage\": ", config_.zero.stage, "}\n")));
  }
  return Wait(communicator_->Barrier());
}

absl::StatusOr<std::map<std::string, std::string>> Engine::LoadCheckpoint(
    const std::string& directory) {
  if (!std::filesystem::exists(directory + "/" + kCompleteMarker)) {
    return absl::FailedPreconditionError(absl::StrCat(
        "checkpoint: ", directory, " is incomplete or missing (no '", kCompleteMarker, "' marker)"));
  }
  const std::string shard = directory + "/" + ShardName(rank(), world_size());
  if (!std::filesystem::exists(shard)) {
    return absl::FailedPreconditionError(absl::StrCat(
        "checkpoint: ", directory, " has no shard for rank ", rank(), " of ", world_size(),
        " (it was written by a group of another size; resharding on load is not supported yet)"));
  }
  ASSIGN_OR_RETURN(NamedTensors tensors, ReadSafetensors(shard));
  std::map<std::string, at::Tensor> by_name(tensors.begin(), tensors.end());
  using Metadata = std::map<std::string, std::string>;
  ASSIGN_OR_RETURN(Metadata metadata, ReadShardMetadata(shard));
  auto expect = [&](const std::string& key, const std::string& want) -> absl::Status {
    auto it = metadata.find(key);
    if (it == metadata.end() || it->second != want) {
      return absl::FailedPreconditionError(absl::StrCat(
          "checkpoint: ", shard, ": ", key, " is ", it == metadata.end() ? "absent" : it->second,
          ", this engine has ", want, " (changing it on load is not supported yet)"));
    }
    return absl::OkStatus();
  };
  RETURN_IF_ERROR(expect("world_size", std::to_string(world_size())));
  RETURN_IF_ERROR(expect("zero_stage", std::to_string(config_.zero.stage)));
  RETURN_IF_ERROR(expect("precision", PrecisionName(config_)));
  RETURN_IF_ERROR(expect("num_parameters", std::to_string(layout_.num_elements())));
  RETURN_IF_ERROR(expect("domain_elements", std::to_string(domain_elements_)));

  auto take = [&](const std::string& name, const at::Tensor& target) -> absl::Status {
    auto it = by_name.find(name);
    if (it == by_name.end()) {
      return absl::InvalidArgumentError(absl::StrCat("checkpoint: ", shard, ": tensor '", name, "' missing"));
    }
    if (it->second.numel() != target.numel() || it->second.scalar_type() != target.scalar_type()) {
      return absl::InvalidArgumentError(absl::StrCat("checkpoint: ", shard, ": tensor '", name,
                                                     "' has the wrong size or dtype"));
    }
    target.copy_(it->second.view(target.sizes()));
    return absl::OkStatus();
  };
  try {
    int64_t offset = 0;
    std::vector<at::Tensor> weights;
    auto it = by_name.find("weights");
    if (it == by_name.end() || it->second.numel() != domain_elements_ ||
        it->second.scalar_type() != param_dtype_) {
      return absl::InvalidArgumentError(absl::StrCat("checkpoint: ", shard, ": bad 'weights' tensor"));
    }
    for (size_t u = 0; u < layout_.units().size(); ++u) {
      at::Tensor target = UnitWeights(u);
      target.copy_(it->second.narrow(0, offset, target.numel()));
      offset += target.numel();
    }
    if (master_.defined()) RETURN_IF_ERROR(take("master", master_));
    RETURN_IF_ERROR(take("exp_avg", exp_avg_));
    RETURN_IF_ERROR(take("exp_avg_sq", exp_avg_sq_));
    if (compensation_.defined()) RETURN_IF_ERROR(take("compensation", compensation_));
    auto rng = by_name.find("rng_state");
    if (rng != by_name.end()) {
      auto generator = at::detail::getDefaultCPUGenerator();
      std::lock_guard<std::mutex> lock(generator.mutex());
      generator.set_state(rng->second);
    }
    grads_.zero_();
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("checkpoint: ", shard, ": ", e.what()));
  }
  auto number = [&](const std::string& key, int64_t* out) {
    auto it = metadata.find(key);
    return it != metadata.end() && absl::SimpleAtoi(it->second, out);
  };
  if (!number("global_steps", &global_steps_) || !number("micro_steps", &micro_steps_) ||
      !number("skipped_steps", &skipped_steps_)) {
    return absl::InvalidArgumentError(absl::StrCat("checkpoint: ", shard, ": bad step counts"));
  }
  last_lr_ = current_lr();
  RETURN_IF_ERROR(AllGatherResident());

  std::map<std::string, std::string> client_state;
  for (const auto& [key, value] : metadata) {
    if (key.rfind(kClientPrefix, 0) == 0) client_state[key.substr(sizeof(kClientPrefix) - 1)] = value;
  }
  RETURN_IF_ERROR(Wait(communicator_->Barrier()));
  return client_state;
}

}  // namespace tandem::engine
