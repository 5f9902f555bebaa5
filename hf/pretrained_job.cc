#include "hf/pretrained_job.h"

#include <algorithm>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "data/image_preprocessor.h"
#include "hf/pretrained_config.h"
#include "jobspec/job_spec.h"
#include "tokenizer/hf_tokenizer.h"

namespace tandem::hf {
namespace {

absl::Status Prefixed(const char* key, const absl::Status& status) {
  return absl::Status(status.code(), absl::StrCat(key, ": ", status.message()));
}

constexpr char kVision[] = "vision.pretrained";
constexpr char kLlm[] = "llm.pretrained";
constexpr char kImageToken[] = "<image>";

absl::Status ResolveLlm(jobspec::JobConfig& job) {
  const std::string dir = job.llm.pretrained;
  auto config = ReadPretrainedConfig(dir);
  if (!config.ok()) return Prefixed(kLlm, config.status());
  if (config->kind == PretrainedKind::kVisionTower) {
    return Prefixed(kLlm, absl::InvalidArgumentError(absl::StrCat(dir, ": a ", config->model_type,
                                                                  " model has no language model")));
  }
  models::LlmConfig llm = *config->llm;
  if (llm.image_token_id < 0) {
    // An LLM alone: LLaVA's image token is its tokenizer's "<image>", or one added after its
    // vocabulary, with a new embedding row when the model has no spare one (LoadLlmWeights).
    auto tokenizer = tokenizer::HfTokenizer::Load(dir);
    if (!tokenizer.ok()) return Prefixed(kLlm, tokenizer.status());
    llm.image_token_id = tokenizer->AddSpecialToken(kImageToken);
    llm.vocab_size = std::max(llm.vocab_size, llm.image_token_id + 1);
  }
  job.llm.model = llm;
  job.llm.pretrained = dir;
  job.vision.model.output_dim = llm.hidden;
  return absl::OkStatus();
}

absl::Status ResolveVision(jobspec::JobConfig& job) {
  const std::string dir = job.vision.pretrained;
  auto config = ReadPretrainedConfig(dir);
  if (!config.ok()) return Prefixed(kVision, config.status());
  if (config->kind == PretrainedKind::kLlm) {
    return Prefixed(kVision, absl::InvalidArgumentError(absl::StrCat(
                                 dir, ": a ", config->model_type, " model has no vision tower")));
  }
  if (job.vision.new_projector && config->kind != PretrainedKind::kLlava) {
    return absl::InvalidArgumentError(absl::StrCat("vision.new_projector: ", dir,
                                                   " is a vision tower alone, whose "
                                                   "projector is always new"));
  }
  models::VisionConfig vision = *config->vision;
  const int64_t hidden = job.llm.model.hidden;
  if (config->kind == PretrainedKind::kLlava && !job.vision.new_projector &&
      vision.output_dim != hidden) {
    return Prefixed(kVision, absl::InvalidArgumentError(
                                 absl::StrCat(dir, ": its projector outputs ", vision.output_dim,
                                              " wide, the LLM is ", hidden)));
  }
  vision.output_dim = hidden;
  auto preprocessor = data::ReadModelImagePreprocessor(dir);
  if (!preprocessor.ok()) return Prefixed(kVision, preprocessor.status());
  if (preprocessor->output_size() != vision.image_size) {
    return Prefixed(kVision,
                    absl::InvalidArgumentError(absl::StrCat(
                        dir, ": its image processor makes images of ", preprocessor->output_size(),
                        " pixels, the tower takes ", vision.image_size)));
  }
  vision.image_mean = preprocessor->image_mean;
  vision.image_std = preprocessor->image_std;
  // LLaVA-NeXT's tiles: the checkpoint's image_grid_pinpoints, or a tower's image processor's
  // (a LlavaNextImageProcessor over a CLIP tower starts a LLaVA-NeXT model).
  if (preprocessor->any_res() || vision.any_res()) {
    if (vision.any_res() && preprocessor->grid_pinpoints != vision.grid_pinpoints) {
      return Prefixed(kVision, absl::InvalidArgumentError(absl::StrCat(
                                   dir,
                                   ": the image processor's image_grid_pinpoints differ "
                                   "from config.json's")));
    }
    if (!vision.any_res() && vision.num_features() != vision.num_patches()) {
      return Prefixed(
          kVision, absl::InvalidArgumentError(absl::StrCat(
                       dir, ": image_grid_pinpoints need the ", vision.grid(), " x ", vision.grid(),
                       " patch features of a tile, the tower gives ", vision.num_features())));
    }
    vision.grid_pinpoints = preprocessor->grid_pinpoints;
  }
  job.vision.model = vision;
  job.vision.pretrained = dir;
  return absl::OkStatus();
}

}  // namespace

absl::Status ResolvePretrainedModels(jobspec::JobConfig& job) {
  if (!job.llm.pretrained.empty()) RETURN_IF_ERROR(ResolveLlm(job));
  if (!job.vision.pretrained.empty()) RETURN_IF_ERROR(ResolveVision(job));
  if (job.llm.pretrained.empty() && job.vision.pretrained.empty()) return absl::OkStatus();
  // The newline embedding belongs with LLaVA-NeXT's tiles: a LLaVA-NeXT LLM's own, or a new one.
  job.llm.model.image_newline = job.vision.model.any_res();
  if (job.vision.model.any_res() && !jobspec::ImagesAtTheirOwnSize(job.data)) {
    return Prefixed(kVision, absl::InvalidArgumentError(absl::StrCat(
                                 job.vision.pretrained,
                                 ": image_grid_pinpoints (LLaVA-NeXT's tiles) read the images of "
                                 "conversation files (data.conversations) or shards (data.shards) "
                                 "at their own size")));
  }
  if (job.data.pack_tokens > job.llm.model.max_seq_len) {
    return absl::InvalidArgumentError(
        absl::StrCat("data.pack_tokens: ", job.data.pack_tokens,
                     " positions a row, more than the LLM's ", job.llm.model.max_seq_len, " (",
                     job.llm.pretrained.empty() ? "llm.model.max_seq_len" : "llm.pretrained", ")"));
  }
  const int64_t needed = jobspec::LlmRowPositions(job);
  if (job.llm.model.max_seq_len < needed) {
    return absl::InvalidArgumentError(absl::StrCat(
        job.llm.pretrained.empty() ? "llm.model.max_seq_len" : "llm.pretrained",
        ": the LLM's positions must hold the image features (",
        job.data.max_images_per_sample == 1
            ? absl::StrCat(jobspec::ImagePositions(job.vision.model))
            : absl::StrCat("data.max_images_per_sample ", job.data.max_images_per_sample, " x ",
                           jobspec::ImagePositions(job.vision.model)),
        ") + data.max_text_tokens (", job.data.max_text_tokens, ") = ", needed, ", it has ",
        job.llm.model.max_seq_len));
  }
  return absl::OkStatus();
}

}  // namespace tandem::hf
