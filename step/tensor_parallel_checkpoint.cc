// ReshardLlmCheckpoint (tensor_parallel_checkpoint.h). The saved layout is read as
// engine/checkpoint.cc writes it (NOTE [Re-partitioning on load] there), through the pieces of the
// format it shares (engine/checkpoint_format.h): each shard's tensors are the concatenation of its
// rank's domain of every unit, a unit holding consecutive parameters in the manifest's order.
#include "step/tensor_parallel_checkpoint.h"

#include <torch/torch.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/atomic_file.h"
#include "common/status_macros.h"
#include "engine/checkpoint_format.h"
#include "engine/safetensors.h"
#include "models/llm.h"
#include "parallel/shard.h"

namespace tandem::step {
namespace {

namespace fs = std::filesystem;

constexpr const char* kOptimizerTensors[] = {"weights", "master", "exp_avg", "exp_avg_sq",
                                             "compensation"};

struct Parameter {
  std::string name;
  std::vector<int64_t> shape;
  int64_t numel() const {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return n;
  }
};

// One saved engine checkpoint: the group of one tensor index.
struct SavedGroup {
  std::string directory;
  int world = 1;
  int stage = 0;
  std::vector<int64_t> units;                     // real elements per unit
  std::vector<engine::SafetensorsHeader> shards;  // by rank
  std::vector<Parameter> parameters;              // the manifest, in order
  std::string dtype;                              // the manifest's parameter dtype
};

absl::Status Bad(const std::string& path, const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat("checkpoint: ", path, ": ", what));
}

// "<name> [<d0>, <d1>] <dtype>" per line.
absl::Status ParseManifest(const std::string& path, const std::string& text, SavedGroup* group) {
  for (absl::string_view line : absl::StrSplit(text, '\n', absl::SkipEmpty())) {
    const size_t open = line.find(" ["), close = line.rfind("] ");
    if (open == absl::string_view::npos || close == absl::string_view::npos || close < open) {
      return Bad(path, absl::StrCat("a parameters line reads \"", line, "\""));
    }
    Parameter parameter{std::string(line.substr(0, open)), {}};
    const absl::string_view dims = line.substr(open + 2, close - open - 2);
    if (!dims.empty()) {
      for (absl::string_view dim : absl::StrSplit(dims, ", ")) {
        int64_t size = 0;
        if (!absl::SimpleAtoi(dim, &size) || size < 0)
          return Bad(path, absl::StrCat("a shape reads [", dims, "]"));
        parameter.shape.push_back(size);
      }
    }
    group->dtype = std::string(line.substr(close + 2));
    group->parameters.push_back(std::move(parameter));
  }
  return absl::OkStatus();
}

absl::StatusOr<SavedGroup> OpenSavedGroup(const std::string& directory) {
  SavedGroup group;
  group.directory = directory;
  const std::string marker = directory + "/" + engine::kCheckpointCompleteMarker;
  if (!fs::exists(marker)) {
    return absl::FailedPreconditionError(
        absl::StrCat("checkpoint: ", directory, " is incomplete or missing (no '",
                     engine::kCheckpointCompleteMarker, "' marker)"));
  }
  ASSIGN_OR_RETURN(group.world, engine::SavedWorldSize(marker));
  for (int r = 0; r < group.world; ++r) {
    const std::string path = directory + "/" + engine::CheckpointShardName(r, group.world);
    if (!fs::exists(path)) {
      return absl::FailedPreconditionError(absl::StrCat("checkpoint: ", path, " is missing"));
    }
    ASSIGN_OR_RETURN(engine::SafetensorsHeader header, engine::ReadSafetensorsHeader(path));
    group.shards.push_back(std::move(header));
  }
  const engine::SafetensorsHeader& first = group.shards[0];
  const std::string* stage = engine::CheckpointMeta(first, "zero_stage");
  const std::string* manifest = engine::CheckpointMeta(first, "parameters");
  if (stage == nullptr || !absl::SimpleAtoi(*stage, &group.stage) || group.stage < 0 ||
      group.stage > 3 || manifest == nullptr) {
    return Bad(first.path, "no zero_stage or parameters");
  }
  RETURN_IF_ERROR(ParseManifest(first.path, *manifest, &group));
  int64_t listed = 0;
  for (const Parameter& parameter : group.parameters) listed += parameter.numel();
  ASSIGN_OR_RETURN(group.units, engine::ParseUnitElements(first, listed));
  return group;
}

// Tensor `name` of every parameter of `group`, in manifest order; undefined when the group has
// none of that name.
absl::StatusOr<std::vector<at::Tensor>> ReadParameters(const SavedGroup& group,
                                                       const std::string& name) {
  if (group.shards[0].Find(name) == nullptr) return std::vector<at::Tensor>{};
  int64_t total = 0;
  for (int64_t numel : group.units) total += numel;
  at::Tensor flat;
  // A stage-0 group is replicated: rank 0's shard holds everything.
  for (int r = 0; r < (group.stage == 0 ? 1 : group.world); ++r) {
    ASSIGN_OR_RETURN(at::Tensor domain, engine::ReadSafetensor(group.shards[r], name));
    domain = domain.view({-1});
    if (!flat.defined()) flat = at::zeros({total}, domain.options());
    int64_t length = 0;
    const auto segments = engine::DomainSegments(group.units, group.world, group.stage, r, &length);
    if (domain.numel() != length) {
      return Bad(group.shards[r].path, absl::StrCat("tensor '", name, "' holds ", domain.numel(),
                                                    " elements, its domain ", length));
    }
    for (const engine::DomainSegment& segment : segments) {
      flat.narrow(0, segment.global, segment.length)
          .copy_(domain.narrow(0, segment.local, segment.length));
    }
  }
  std::vector<at::Tensor> parameters;
  int64_t offset = 0;
  for (const Parameter& parameter : group.parameters) {
    parameters.push_back(flat.narrow(0, offset, parameter.numel()).view(parameter.shape));
    offset += parameter.numel();
  }
  return parameters;
}

// The whole parameter out of the saved indices' parts (index 0's for a replicated one), and this
// rank's shard of it.
at::Tensor Reshard(const models::LlmConfig& config, const std::string& name,
                   const std::vector<at::Tensor>& parts, int size, int index) {
  const int saved = static_cast<int>(parts.size());
  const parallel::Shard from = models::LlmParameterShard(config, name, saved, 0);
  const at::Tensor whole = from.split() ? torch::cat(parts, from.dim) : parts[0];
  return parallel::TakeShard(whole, models::LlmParameterShard(config, name, size, index))
      .contiguous();
}

std::string ShapeText(at::IntArrayRef shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}

}  // namespace

absl::StatusOr<int> SavedTensorParallelDegree(const std::string& checkpoint) {
  const fs::path llm = fs::path(checkpoint) / "llm";
  if (fs::exists(llm / "complete")) return 1;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(llm, ec)) {
    const std::string name = entry.path().filename().string();
    const size_t of = name.find("-of-");
    int degree = 0;
    if (name.rfind("tensor-0-of-", 0) == 0 && absl::SimpleAtoi(name.substr(of + 4), &degree) &&
        degree > 1) {
      return degree;
    }
  }
  return absl::FailedPreconditionError(
      absl::StrCat("checkpoint: ", llm.string(),
                   " holds neither an engine checkpoint nor tensor-<i>-of-<T> directories"));
}

std::string LlmCheckpointDirectory(int degree, int index) {
  return degree == 1 ? "llm" : absl::StrCat("llm/tensor-", index, "-of-", degree);
}

absl::Status ReshardLlmCheckpoint(const std::string& checkpoint, const models::LlmConfig& config,
                                  int size, int index, const std::string& scratch) {
  ASSIGN_OR_RETURN(const int saved, SavedTensorParallelDegree(checkpoint));
  std::vector<SavedGroup> groups;
  for (int i = 0; i < saved; ++i) {
    ASSIGN_OR_RETURN(
        SavedGroup group,
        OpenSavedGroup((fs::path(checkpoint) / LlmCheckpointDirectory(saved, i)).string()));
    groups.push_back(std::move(group));
  }
  const engine::SafetensorsHeader& first = groups[0].shards[0];
  const std::string* step = engine::CheckpointMeta(first, "global_steps");
  if (step == nullptr) return Bad(first.path, "no global_steps");
  const auto same_name = [](const Parameter& a, const Parameter& b) { return a.name == b.name; };
  for (const SavedGroup& group : groups) {
    const std::string* steps = engine::CheckpointMeta(group.shards[0], "global_steps");
    if (steps == nullptr || *steps != *step) {
      return absl::FailedPreconditionError(
          absl::StrCat("checkpoint: ", group.directory, " was saved at step ",
                       steps ? *steps : "(none)", ", ", groups[0].directory, " at step ", *step));
    }
    if (!std::equal(group.parameters.begin(), group.parameters.end(), groups[0].parameters.begin(),
                    groups[0].parameters.end(), same_name)) {
      return Bad(group.directory, "holds other parameters than " + groups[0].directory);
    }
  }

  std::vector<std::pair<std::string, at::Tensor>> tensors;
  std::vector<std::string> manifest;
  int64_t total = 0;
  try {
    for (const char* name : kOptimizerTensors) {
      std::vector<std::vector<at::Tensor>> parts;  // by saved index, by parameter
      for (const SavedGroup& group : groups) {
        ASSIGN_OR_RETURN(std::vector<at::Tensor> values, ReadParameters(group, name));
        parts.push_back(std::move(values));
      }
      if (parts[0].empty()) continue;
      std::vector<at::Tensor> mine;
      for (size_t k = 0; k < groups[0].parameters.size(); ++k) {
        std::vector<at::Tensor> pieces;
        for (const auto& values : parts) pieces.push_back(values.at(k));
        const at::Tensor cut = Reshard(config, groups[0].parameters[k].name, pieces, size, index);
        if (std::string(name) == "weights") {
          manifest.push_back(absl::StrCat(groups[0].parameters[k].name, " ", ShapeText(cut.sizes()),
                                          " ", groups[0].dtype));
          total += cut.numel();
        }
        mine.push_back(cut.view({-1}));
      }
      tensors.emplace_back(name, mine.empty() ? at::empty({0}) : torch::cat(mine));
    }
    if (first.Find("rng_state") != nullptr) {
      ASSIGN_OR_RETURN(at::Tensor state, engine::ReadSafetensor(first, "rng_state"));
      tensors.emplace_back("rng_state", state);
    }
  } catch (const c10::Error& e) {
    return Bad(checkpoint, e.what_without_backtrace());
  }
  std::map<std::string, std::string> metadata = first.metadata;
  metadata.erase("tandem.crc32");
  metadata["world_size"] = "1";
  metadata["zero_stage"] = "0";
  metadata["num_parameters"] = std::to_string(total);
  metadata["unit_elements"] = total > 0 ? std::to_string(total) : "";
  metadata["domain_elements"] = std::to_string(total);
  metadata["parameters"] = absl::StrJoin(manifest, "\n");
  RETURN_IF_ERROR(engine::WriteSafetensors(scratch + "/" + engine::CheckpointShardName(0, 1),
                                           tensors, metadata));

  // Frozen parameters: each index's frozen.safetensors holds its shards whole.
  const std::string frozen0 = groups[0].directory + "/" + engine::kCheckpointFrozenFile;
  if (fs::exists(frozen0)) {
    std::vector<std::pair<std::string, at::Tensor>> frozen;
    std::vector<std::string> frozen_manifest;
    try {
      std::vector<std::map<std::string, at::Tensor>> parts;
      for (const SavedGroup& group : groups) {
        ASSIGN_OR_RETURN(auto values, engine::ReadSafetensors(group.directory + "/" +
                                                              engine::kCheckpointFrozenFile));
        parts.emplace_back(values.begin(), values.end());
      }
      for (const auto& [name, value] : parts[0]) {
        std::vector<at::Tensor> pieces;
        for (const auto& values : parts) {
          auto it = values.find(name);
          if (it == values.end())
            return Bad(frozen0, "frozen parameter " + name + " is not in every index");
          pieces.push_back(it->second);
        }
        frozen.emplace_back(name, Reshard(config, name, pieces, size, index));
        frozen_manifest.push_back(absl::StrCat(name, " ", ShapeText(frozen.back().second.sizes())));
      }
    } catch (const c10::Error& e) {
      return Bad(frozen0, e.what_without_backtrace());
    }
    RETURN_IF_ERROR(engine::WriteSafetensors(
        scratch + "/" + engine::kCheckpointFrozenFile, frozen,
        {{"format", "pt"}, {"frozen_parameters", absl::StrJoin(frozen_manifest, "\n")}}));
  }
  return WriteFileAtomically(
      scratch + "/" + engine::kCheckpointCompleteMarker,
      absl::StrCat("{\"global_steps\": ", *step, ", \"world_size\": 1, \"zero_stage\": 0}\n"));
}

}  // namespace tandem::step
