#include "hf/pretrained_job.h"

#include <filesystem>

#include "absl/strings/str_cat.h"
#include "data/image_preprocessor.h"
#include "hf/pretrained_config.h"
#include "jobspec/job_spec.h"

namespace tandem::hf {
namespace {

absl::Status Prefixed(const absl::Status& status) {
  return absl::Status(status.code(), absl::StrCat("vision.pretrained: ", status.message()));
}

}  // namespace

absl::Status ResolvePretrainedModels(jobspec::JobConfig& job) {
  if (job.vision.pretrained.empty()) return absl::OkStatus();
  const std::string dir = jobspec::SpecPath(job.vision.pretrained, job.spec_dir);
  auto config = ReadPretrainedConfig(dir);
  if (!config.ok()) return Prefixed(config.status());
  if (config->kind == PretrainedKind::kLlm) {
    return Prefixed(absl::InvalidArgumentError(
        absl::StrCat(dir, ": a ", config->model_type, " model has no vision tower")));
  }
  models::VisionConfig vision = *config->vision;
  const int64_t hidden = job.llm.model.hidden;
  if (config->kind == PretrainedKind::kLlava && vision.output_dim != hidden) {
    return Prefixed(absl::InvalidArgumentError(absl::StrCat(
        dir, ": its projector outputs ", vision.output_dim, " wide, llm.model.hidden is ", hidden)));
  }
  vision.output_dim = hidden;
  const std::string file = (std::filesystem::path(dir) / "preprocessor_config.json").string();
  auto preprocessor = data::ReadImagePreprocessor(file);
  if (!preprocessor.ok()) return Prefixed(preprocessor.status());
  if (preprocessor->output_size() != vision.image_size) {
    return Prefixed(absl::InvalidArgumentError(absl::StrCat(file, ": makes images of ", preprocessor->output_size(),
                                                            " pixels, the tower takes ", vision.image_size)));
  }
  vision.image_mean = preprocessor->image_mean;
  vision.image_std = preprocessor->image_std;
  const int64_t needed = vision.num_features() + job.data.max_text_tokens;
  if (job.llm.model.max_seq_len < needed) {
    return absl::InvalidArgumentError(absl::StrCat(
        "llm.model.max_seq_len: must be >= the pretrained tower's image features (", vision.num_features(),
        ") + data.max_text_tokens (", job.data.max_text_tokens, ") = ", needed, ", got ",
        job.llm.model.max_seq_len));
  }
  job.vision.model = vision;
  job.vision.pretrained = dir;
  return absl::OkStatus();
}

}  // namespace tandem::hf
