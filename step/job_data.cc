#include "step/job_data.h"

#include <filesystem>
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
  data::AnyResGeometry any_res;
  if (vision.any_res()) any_res = {vision.grid_pinpoints, vision.image_size, vision.grid()};
  auto codec = data::TextCodec::Hf(*std::move(tokenizer), *format, vision.num_features(),
                                   std::move(any_res));
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
  if (!job.vision.pretrained.empty()) {
    auto read = data::ReadModelImagePreprocessor(job.vision.pretrained);
    if (!read.ok()) return Prefixed("vision.pretrained", read.status());
    preprocessor = std::make_shared<const data::ImagePreprocessor>(*std::move(read));
  }
  ASSIGN_OR_RETURN(data::Datasets datasets,
                   data::OpenDatasets(job.data, job.vision.model.image_size, preprocessor));
  std::shared_ptr<const data::TextCodec> text;
  const auto saved = std::filesystem::path(resume_checkpoint) / "tokenizer.json";
  std::error_code ec;
  if (job.llm.pretrained.empty() && !resume_checkpoint.empty() &&
      std::filesystem::exists(saved, ec)) {
    ASSIGN_OR_RETURN(data::Tokenizer words, data::Tokenizer::Load(saved.string()));
    text = std::make_shared<const data::TextCodec>(data::TextCodec::Words(std::move(words)));
  } else if (job.llm.pretrained.empty()) {
    text = std::make_shared<const data::TextCodec>(
        data::TextCodec::Words(data::Tokenizer::Build(datasets.train->VocabularyTexts())));
  } else {
    ASSIGN_OR_RETURN(data::TextCodec codec, OpenPretrainedText(job));
    text = std::make_shared<const data::TextCodec>(std::move(codec));
  }
  // Conversation files may hold any number of images a sample; the word tokenizer's layout reads
  // one, so a file it cannot train on fails here rather than at the step that meets the sample.
  if (job.data.kind == data::DataConfig::Kind::kConversations && text->image_token_id() < 0) {
    for (const data::Dataset* dataset : {datasets.train.get(), datasets.eval.get()}) {
      for (int64_t i = 0; dataset != nullptr && i < dataset->size(); ++i) {
        RETURN_IF_ERROR(data::CheckImageCount(*dataset, i, *text, job.data.max_images_per_sample));
      }
    }
  }
  return std::make_shared<const JobData>(JobData{std::move(datasets), std::move(text)});
}

}  // namespace tandem::step
