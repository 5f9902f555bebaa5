#include "hf/pretrained_weights.h"

#include <torch/torch.h>

#include <algorithm>
#include <functional>
#include <map>
#include <set>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "hf/weight_names.h"
#include "parallel/shard.h"

namespace tandem::hf {
namespace {

using NamesOf = std::function<absl::StatusOr<std::vector<LocalName>>(const std::string&)>;

std::string ShapeText(at::IntArrayRef shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}

std::string DtypeName(at::ScalarType dtype) {
  switch (dtype) {
    case at::kFloat:
      return "float32";
    case at::kBFloat16:
      return "bfloat16";
    case at::kHalf:
      return "float16";
    default:
      return c10::toString(dtype);
  }
}

// The shape transformers stores `ours` in, one of `count` stacked tensors.
std::vector<int64_t> TheirShape(const std::string& ours, at::IntArrayRef shape, size_t count) {
  std::vector<int64_t> theirs(shape.begin(), shape.end());
  if (ours == "class_token") return {shape.back()};         // [1, 1, h] -> [h]
  if (ours == "positions") return {shape[1], shape[2]};     // [1, N, h] -> [N, h]
  if (count > 1) theirs[0] /= static_cast<int64_t>(count);  // qkv rows
  return theirs;
}

// `extra_vocab_rows`: the model's embedding (and head) has that many rows more than the
// checkpoint's, for tokens added after its vocabulary; they are zero. `shards`: how a
// tensor-parallel model's parameters are split (models::LlmImpl::shards); each takes its shard of
// the whole tensor.
absl::Status Load(const PretrainedConfig& config, const CheckpointFiles& files,
                  torch::nn::Module& model, const std::set<Part>& parts, const NamesOf& names_of,
                  bool tied_head, int64_t extra_vocab_rows,
                  const std::map<std::string, parallel::Shard>& shards = {}) {
  const std::string& dir = config.directory;
  std::map<std::pair<Part, std::string>, std::string> available;  // (part, local name) -> full name
  for (const std::string& full : files.Names()) {
    ASSIGN_OR_RETURN(const auto local, ClassifyCheckpointName(config.kind, full));
    if (!local || !parts.count(local->part)) continue;
    available[{local->part, local->name}] = full;
  }
  std::set<std::string> used;
  torch::NoGradGuard no_grad;
  for (auto& item : model.named_parameters(/*recurse=*/true)) {
    const std::string& ours = item.key();
    at::Tensor& parameter = item.value();
    auto theirs = names_of(ours);
    if (!theirs.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(dir, ": ", theirs.status().message()));
    }
    if (theirs->empty()) continue;  // left as initialised
    const auto shard = shards.find(ours);
    const parallel::Shard split = shard != shards.end() ? shard->second : parallel::Shard{};
    std::vector<int64_t> whole = parameter.sizes().vec();
    if (split.split()) whole[split.dim] = split.full;
    std::vector<int64_t> expected = TheirShape(ours, whole, theirs->size());
    const bool vocabulary = ours == "embed.weight" || ours == "head.weight";
    if (vocabulary) expected[0] -= extra_vocab_rows;
    std::vector<at::Tensor> tensors;
    for (const LocalName& local : *theirs) {
      const auto it = available.find({local.part, local.name});
      if (it == available.end()) {
        return absl::InvalidArgumentError(
            absl::StrCat(dir, ": missing tensor '", FullName(config.kind, local), "' ",
                         ShapeText(expected), " that config.json implies"));
      }
      const engine::SafetensorsEntry* entry = files.Find(it->second);
      if (!at::isFloatingType(entry->dtype) ||
          (!config.dtype.empty() && DtypeName(entry->dtype) != config.dtype)) {
        return absl::InvalidArgumentError(absl::StrCat(
            dir, ": tensor '", it->second, "' is ", DtypeName(entry->dtype), ", config.json says ",
            config.dtype.empty() ? "a floating-point dtype" : config.dtype));
      }
      if (entry->shape != expected) {
        return absl::InvalidArgumentError(
            absl::StrCat(dir, ": tensor '", it->second, "' has shape ", ShapeText(entry->shape),
                         ", config.json makes it ", ShapeText(expected)));
      }
      ASSIGN_OR_RETURN(at::Tensor tensor, files.Read(it->second));
      tensors.push_back(std::move(tensor));
      used.insert(it->second);
    }
    at::Tensor value = tensors.size() == 1 ? tensors[0] : torch::cat(tensors, 0);
    if (vocabulary && extra_vocab_rows > 0) {
      value =
          torch::cat({value, torch::zeros({extra_vocab_rows, value.size(1)}, value.options())}, 0);
    }
    parameter.copy_(parallel::TakeShard(value.reshape(whole), split).to(parameter.dtype()));
  }
  for (const auto& [local, full] : available) {
    if (used.count(full)) continue;
    if (local.first == Part::kLmHead && tied_head)
      continue;  // a tied checkpoint may still store it
    return absl::InvalidArgumentError(
        absl::StrCat(dir, ": unexpected tensor '", full,
                     "': the model config.json describes has no place for it"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status LoadVisionWeights(const PretrainedConfig& config, const CheckpointFiles& files,
                               models::VisionEncoderImpl& vision, bool new_projector) {
  if (config.kind == PretrainedKind::kLlm) {
    return absl::InvalidArgumentError(absl::StrCat(config.directory, ": a ", config.model_type,
                                                   " checkpoint has no vision tower"));
  }
  std::set<Part> parts{Part::kVision};
  NamesOf names = TheirVisionNames;
  if (config.kind == PretrainedKind::kLlava && !new_projector) {
    parts.insert(Part::kProjector);
  } else {
    // A tower alone, or a new projector: its parameters are left as initialised.
    names = [](const std::string& ours) -> absl::StatusOr<std::vector<LocalName>> {
      if (ours.rfind("projector.", 0) == 0) return std::vector<LocalName>{};
      return TheirVisionNames(ours);
    };
  }
  return Load(config, files, vision, parts, names, /*tied_head=*/false, /*extra_vocab_rows=*/0);
}

absl::Status LoadLlmWeights(const PretrainedConfig& config, const CheckpointFiles& files,
                            models::LlmImpl& llm) {
  if (config.kind == PretrainedKind::kVisionTower) {
    return absl::InvalidArgumentError(absl::StrCat(config.directory, ": a ", config.model_type,
                                                   " checkpoint has no language model"));
  }
  // A token added after the checkpoint's vocabulary (LLaVA's <image>, hf/pretrained_job.h) adds
  // rows.
  const int64_t extra = std::max<int64_t>(llm.config().vocab_size - config.llm->vocab_size, 0);
  // LLaVA-NeXT's newline comes from a LLaVA-NeXT checkpoint; over any other it starts as
  // initialised.
  NamesOf names = TheirLlmNames;
  if (!config.llm->image_newline) {
    names = [](const std::string& ours) -> absl::StatusOr<std::vector<LocalName>> {
      if (ours == "image_newline") return std::vector<LocalName>{};
      return TheirLlmNames(ours);
    };
  }
  std::set<Part> parts{Part::kLlm, Part::kLmHead};
  if (llm.config().image_newline) parts.insert(Part::kNewline);  // else a checkpoint's is unused
  return Load(config, files, llm, parts, names, llm.config().tie_embeddings, extra, llm.shards());
}

absl::Status LoadPretrainedVision(const std::string& directory, models::VisionEncoderImpl& vision,
                                  bool new_projector) {
  ASSIGN_OR_RETURN(const PretrainedConfig config, ReadPretrainedConfig(directory));
  ASSIGN_OR_RETURN(const CheckpointFiles files, CheckpointFiles::Open(directory));
  return LoadVisionWeights(config, files, vision, new_projector);
}

absl::Status LoadPretrainedLlm(const std::string& directory, models::LlmImpl& llm) {
  ASSIGN_OR_RETURN(const PretrainedConfig config, ReadPretrainedConfig(directory));
  ASSIGN_OR_RETURN(const CheckpointFiles files, CheckpointFiles::Open(directory));
  return LoadLlmWeights(config, files, llm);
}

}  // namespace tandem::hf
