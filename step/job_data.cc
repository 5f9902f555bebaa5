#include "step/job_data.h"

#include <filesystem>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "data/batch.h"
#include "data/image_preprocessor.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/hf_tokenizer.h"

namespace tandem::step {
namespace {

absl::Status Prefixed(const char* key, const absl::Status& status) {
  return absl::Status(status.code(), absl::StrCat(key, ": ", status.message()));
}

// LLaVA-NeXT's tiling of the job's tower; not enabled() without image_grid_pinpoints.
data::AnyResGeometry AnyRes(const models::VisionConfig& vision) {
  if (!vision.any_res()) return {};
  return {vision.grid_pinpoints, vision.image_size, vision.grid()};
}

absl::StatusOr<data::TextCodec> OpenPretrainedText(const jobspec::JobConfig& job) {
  auto tokenizer = tokenizer::HfTokenizer::Load(job.llm.pretrained);
  if (!tokenizer.ok()) return Prefixed("llm.pretrained", tokenizer.status());
  tokenizer->AddSpecialToken("<image>");  // as hf::ResolvePretrainedModels placed it
  absl::StatusOr<tokenizer::ChatTemplate> format =
      tokenizer::ChatTemplate::For(job.llm.chat_template, *tokenizer);
  if (!format.ok()) {
    return Prefixed("llm.chat_template",
                    job.llm.chat_template.empty()
                        ? absl::InvalidArgumentError(
                              absl::StrCat(job.llm.pretrained, ": ", format.status().message()))
                        : format.status());
  }
  // LLaVA-NeXT's images take positions by their size (hf::ResolvePretrainedModels read the
  // pinpoints).
  const models::VisionConfig& vision = job.vision.model;
  auto codec =
      data::TextCodec::Hf(*std::move(tokenizer), *format, vision.num_features(), AnyRes(vision));
  if (!codec.ok()) {
    return Prefixed("llm.pretrained", absl::InvalidArgumentError(absl::StrCat(
                                          job.llm.pretrained, ": ", codec.status().message())));
  }
  if (codec->image_token_id() != job.llm.model.image_token_id) {
    return Prefixed("llm.pretrained", absl::InvalidArgumentError(absl::StrCat(
                                          job.llm.pretrained, ": the tokenizer's \"<image>\" is ",
                                          codec->image_token_id(), ", config.json's image token ",
                                          job.llm.model.image_token_id)));
  }
  if (codec->vocab_size() > job.llm.model.vocab_size) {
    return Prefixed("llm.pretrained",
                    absl::InvalidArgumentError(absl::StrCat(
                        job.llm.pretrained, ": the tokenizer has ", codec->vocab_size(),
                        " tokens, the model's vocabulary ", job.llm.model.vocab_size)));
  }
  return codec;
}

}  // namespace

absl::StatusOr<std::shared_ptr<const JobData>> OpenJobData(const jobspec::JobConfig& job,
                                                           const std::string& resume_checkpoint) {
  std::shared_ptr<const data::ImagePreprocessor> preprocessor;
  const models::VisionConfig& vision = job.vision.model;
  if (!job.vision.pretrained.empty()) {
    auto read = data::ReadModelImagePreprocessor(job.vision.pretrained);
    if (!read.ok()) return Prefixed("vision.pretrained", read.status());
    preprocessor = std::make_shared<const data::ImagePreprocessor>(*std::move(read));
  } else if (vision.any_res()) {
    // Tandem's own tower cuts tiles as the processor `tandem export` writes for it.
    ASSIGN_OR_RETURN(data::ImagePreprocessor own,
                     data::OwnTowerPreprocessor(vision.image_size, vision.image_mean,
                                                vision.image_std, vision.grid_pinpoints));
    preprocessor = std::make_shared<const data::ImagePreprocessor>(std::move(own));
  }
  ASSIGN_OR_RETURN(data::Datasets datasets,
                   data::OpenDatasets(job.data, job.vision.model.image_size, preprocessor));
  if (!resume_checkpoint.empty()) {
    RETURN_IF_ERROR(data::CheckShardManifest(
        (std::filesystem::path(resume_checkpoint) / kDataManifest).string(),
        datasets.train->Shards()));
  }
  data::SampleOrder order = data::TrainOrder(job.data, *datasets.train);
  std::shared_ptr<const data::TextCodec> text;
  if (!job.llm.pretrained.empty()) {
    ASSIGN_OR_RETURN(data::TextCodec codec, OpenPretrainedText(job));
    text = std::make_shared<const data::TextCodec>(std::move(codec));
    return std::make_shared<const JobData>(
        JobData{std::move(datasets), std::move(text), std::move(order)});
  }
  // From scratch: the vocabulary saved with the checkpoint resumed, else the training texts'.
  const auto saved = std::filesystem::path(resume_checkpoint) / "tokenizer.json";
  std::error_code ec;
  std::optional<data::Tokenizer> words;
  if (!resume_checkpoint.empty() && std::filesystem::exists(saved, ec)) {
    ASSIGN_OR_RETURN(words, data::Tokenizer::Load(saved.string()));
  } else {
    words = data::Tokenizer::FromCounts(datasets.train->VocabularyCounts());
  }
  if (!jobspec::ConversationData(job.data)) {
    text = std::make_shared<const data::TextCodec>(data::TextCodec::Words(*std::move(words)));
  } else {
    text = std::make_shared<const data::TextCodec>(
        data::TextCodec::WordsAtMarks(*std::move(words), vision.num_features(), AnyRes(vision)));
  }
  return std::make_shared<const JobData>(
      JobData{std::move(datasets), std::move(text), std::move(order)});
}

}  // namespace tandem::step
