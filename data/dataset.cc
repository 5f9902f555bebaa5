#include "data/dataset.h"

#include <filesystem>

#include "absl/strings/str_cat.h"
#include "common/atomic_file.h"
#include "common/paths.h"
#include "common/status_macros.h"
#include "data/conversation_dataset.h"
#include "data/jsonl_dataset.h"
#include "data/mixture_dataset.h"
#include "data/shapes.h"
#include "data/shard_dataset.h"

namespace tandem::data {
namespace {

absl::StatusOr<Datasets> OpenShapes(const ShapesConfig& config, int64_t image_size) {
  const auto text = config.conversations ? ShapesText::kConversations : ShapesText::kCaptions;
  if (config.train_samples <= 0 || config.eval_samples < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "shapes data: train_samples must be positive and eval_samples non-negative, got ",
        config.train_samples, " and ", config.eval_samples));
  }
  Datasets datasets;
  datasets.train = std::make_unique<ShapesDataset>(config.seed, image_size, Split::kTrain,
                                                   config.train_samples, text);
  if (config.eval_samples > 0) {
    datasets.eval = std::make_unique<ShapesDataset>(config.seed, image_size, Split::kEval,
                                                    config.eval_samples, text);
  }
  return datasets;
}

// A jsonl or conversations dataset: DatasetType::Open for the train and eval files.
// `more`: what DatasetType::Open takes after those.
template <typename DatasetType, typename... More>
absl::StatusOr<Datasets> OpenFiles(const std::string& kind, const std::string& train_path,
                                   const std::string& eval_path, int64_t image_size,
                                   const std::shared_ptr<const ImagePreprocessor>& preprocessor,
                                   bool anywhere, const More&... more) {
  if (train_path.empty())
    return absl::InvalidArgumentError(absl::StrCat(kind, " data: train_path is empty"));
  Datasets datasets;
  ASSIGN_OR_RETURN(datasets.train,
                   DatasetType::Open(train_path, image_size, preprocessor, anywhere, more...));
  if (!eval_path.empty()) {
    ASSIGN_OR_RETURN(datasets.eval,
                     DatasetType::Open(eval_path, image_size, preprocessor, anywhere, more...));
  }
  return datasets;
}

}  // namespace

Dataset::~Dataset() = default;

absl::Status CheckImageIndex(const Dataset& dataset, int64_t index, int64_t image,
                             std::string_view kind) {
  if (index < 0 || index >= dataset.size()) {
    return absl::OutOfRangeError(
        absl::StrCat(std::string(kind), ": index ", index, " outside [0, ", dataset.size(), ")"));
  }
  if (image < 0 || image >= dataset.ImageCount(index)) {
    return absl::OutOfRangeError(absl::StrCat(dataset.Describe(index), ": image ", image,
                                              " outside [0, ", dataset.ImageCount(index), ")"));
  }
  return absl::OkStatus();
}

absl::StatusOr<Example> FirstImageExample(const Dataset& dataset, int64_t index,
                                          std::string_view kind) {
  if (index < 0 || index >= dataset.size()) {
    return absl::OutOfRangeError(
        absl::StrCat(std::string(kind), ": index ", index, " outside [0, ", dataset.size(), ")"));
  }
  Example example{Image{}, dataset.Text(index)};
  if (dataset.ImageCount(index) > 0) {
    ASSIGN_OR_RETURN(example.image, dataset.GetImage(index, 0));
  }
  return example;
}

std::vector<tokenizer::ChatMessage> Dataset::Messages(int64_t index) const {
  return {{"user", "<image>"}, {"assistant", Text(index)}};
}

std::vector<std::string> Dataset::VocabularyTexts() const { return AllTexts(*this); }

WordCounts Dataset::VocabularyCounts() const {
  WordCounts counts;
  for (const std::string& text : VocabularyTexts()) CountWords(text, counts);
  return counts;
}

absl::StatusOr<Image> Dataset::GetImage(int64_t index, int64_t image) const {
  if (image < 0 || image >= ImageCount(index)) {
    return absl::OutOfRangeError(
        absl::StrCat(Describe(index), ": image ", image, " outside [0, ", ImageCount(index), ")"));
  }
  ASSIGN_OR_RETURN(Example example, Get(index));
  return std::move(example.image);
}

ImageFolder::ImageFolder(std::string folder)
    : folder_(folder.empty() ? "." : std::move(folder)), resolved_(ResolveDirectory(folder_)) {}

absl::Status ImageFolder::CheckInside(const std::string& image, const std::string& where) const {
  if (resolved_ && IsInsideResolved(image, *resolved_)) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      where, ": image ", image, " is outside ", folder_,
      ", the data file's directory (an absolute path, \"..\" or a symlink leading out); set "
      "data.allow_images_outside to true to read it"));
}

namespace {

// A decoded sample image at the model's size: resized, or through the preprocessor.
absl::StatusOr<Image> SizeSampleImage(Image image, const std::string& path, int64_t image_size,
                                      const ImagePreprocessor* preprocessor) {
  if (preprocessor == nullptr) return ResizeBilinear(image, image_size, image_size);
  auto processed = Preprocess(*preprocessor, image);
  if (!processed.ok()) {
    return absl::Status(processed.status().code(),
                        absl::StrCat(path, ": ", processed.status().message()));
  }
  return processed;
}

}  // namespace

absl::StatusOr<Image> LoadSampleImage(const std::string& path, int64_t image_size,
                                      const ImagePreprocessor* preprocessor) {
  ASSIGN_OR_RETURN(const std::string bytes, ReadUserFile(path));
  return LoadSampleImageBytes(bytes, path, image_size, preprocessor);
}

absl::StatusOr<Image> LoadSampleImageBytes(std::string_view bytes, const std::string& name,
                                           int64_t image_size,
                                           const ImagePreprocessor* preprocessor) {
  // A JPEG for a preprocessor is resized as the bytes it decodes to, as Pillow resizes it: the
  // same pixels as through floats, without converting the full-size image twice.
  if (preprocessor != nullptr && IsJpeg(bytes)) {
    ASSIGN_OR_RETURN(const Image8 decoded, DecodeJpeg8(bytes, name, MaxPixelsFor(image_size)));
    absl::StatusOr<Image> processed = Preprocess8(*preprocessor, decoded);
    if (!processed.ok()) {
      return absl::Status(processed.status().code(),
                          absl::StrCat(name, ": ", processed.status().message()));
    }
    return processed;
  }
  ASSIGN_OR_RETURN(Image image, DecodeImage(bytes, name, MaxPixelsFor(image_size)));
  return SizeSampleImage(std::move(image), name, image_size, preprocessor);
}

absl::StatusOr<std::vector<Image>> Dataset::GetTiles(int64_t index, int64_t image) const {
  ASSIGN_OR_RETURN(Image one, GetImage(index, image));
  std::vector<Image> tiles;
  tiles.push_back(std::move(one));
  return tiles;
}

absl::StatusOr<Resolution> Dataset::ImageSize(int64_t index, int64_t image) const {
  ASSIGN_OR_RETURN(const Image one, GetImage(index, image));
  return Resolution{one.height, one.width};
}

std::vector<std::string> AllTexts(const Dataset& dataset) {
  std::vector<std::string> texts;
  texts.reserve(dataset.size());
  for (int64_t i = 0; i < dataset.size(); ++i) texts.push_back(dataset.Text(i));
  return texts;
}

absl::StatusOr<Datasets> OpenDatasets(const DataConfig& config, int64_t image_size,
                                      std::shared_ptr<const ImagePreprocessor> preprocessor) {
  if (image_size <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("image_size must be positive, got ", image_size));
  }
  switch (config.kind) {
    case DataConfig::Kind::kShapes:
      return OpenShapes(config.shapes, image_size);
    case DataConfig::Kind::kJsonl:
      return OpenFiles<JsonlDataset>("jsonl", config.jsonl.train_path, config.jsonl.eval_path,
                                     image_size, preprocessor, config.allow_images_outside);
    case DataConfig::Kind::kConversations:
      return OpenFiles<ConversationDataset>(
          "conversations", config.conversations.train_path, config.conversations.eval_path,
          image_size, preprocessor, config.allow_images_outside,
          ConversationLimits{config.max_images_per_sample, config.video_frames});
    case DataConfig::Kind::kMixture: {
      std::vector<MixtureDataset::Source> train, eval;
      for (const MixtureSource& source : config.mixture) {
        absl::StatusOr<Datasets> opened =
            OpenDatasets(SourceConfig(config, source), image_size, preprocessor);
        if (!opened.ok()) {
          return absl::Status(
              opened.status().code(),
              absl::StrCat("data.mixture source ", source.name, ": ", opened.status().message()));
        }
        train.push_back({source.name, std::move(opened->train)});
        if (opened->eval) eval.push_back({source.name, std::move(opened->eval)});
      }
      Datasets datasets;
      datasets.train = std::make_unique<MixtureDataset>(std::move(train));
      if (!eval.empty()) datasets.eval = std::make_unique<MixtureDataset>(std::move(eval));
      return datasets;
    }
    case DataConfig::Kind::kShards: {
      Datasets datasets;
      // Held-out samples are never skipped (data.on_bad_sample applies to training).
      const ShardDataset::Options eval{config.max_images_per_sample, config.shards.shuffle_buffer,
                                       /*skip_bad_samples=*/false};
      ShardDataset::Options train = eval;
      train.skip_bad_samples = config.on_bad_sample == BadSamplePolicy::kSkip;
      ASSIGN_OR_RETURN(datasets.train, ShardDataset::Open({config.shards.train_pattern}, image_size,
                                                          preprocessor, train));
      if (!config.shards.eval_pattern.empty()) {
        ASSIGN_OR_RETURN(datasets.eval, ShardDataset::Open({config.shards.eval_pattern}, image_size,
                                                           preprocessor, eval));
      }
      return datasets;
    }
  }
  return absl::InvalidArgumentError("unknown data kind");
}

SampleOrder TrainOrder(const DataConfig& config, const Dataset& train) {
  if (config.kind == DataConfig::Kind::kMixture) {
    const auto* mixture = dynamic_cast<const MixtureDataset*>(&train);
    SampleOrder order;
    for (size_t s = 0; mixture != nullptr && s < config.mixture.size(); ++s) {
      order.mixture.push_back(
          {config.mixture[s].weight,
           TrainOrder(SourceConfig(config, config.mixture[s]), *mixture->sources()[s].dataset)});
    }
    return order;
  }
  return SampleOrder{train.ShardSizes(),
                     config.kind == DataConfig::Kind::kShards ? config.shards.shuffle_buffer : 0,
                     {}};
}

}  // namespace tandem::data
