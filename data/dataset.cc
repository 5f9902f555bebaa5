#include "data/dataset.h"

#include <filesystem>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "data/jsonl_dataset.h"
#include "data/shapes.h"

namespace tandem::data {
namespace {

// `path` as given when absolute or when there is no spec directory, else spec_dir/path.
std::string Resolve(const std::string& path, const std::string& spec_dir) {
  const std::filesystem::path given(path);
  if (given.is_absolute() || spec_dir.empty()) return path;
  return (std::filesystem::path(spec_dir) / given).lexically_normal().string();
}

absl::StatusOr<Datasets> OpenShapes(const ShapesConfig& config, int64_t image_size) {
  if (config.train_samples <= 0 || config.eval_samples < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "shapes data: train_samples must be positive and eval_samples non-negative, got ",
        config.train_samples, " and ", config.eval_samples));
  }
  Datasets datasets;
  datasets.train =
      std::make_unique<ShapesDataset>(config.seed, image_size, Split::kTrain, config.train_samples);
  if (config.eval_samples > 0) {
    datasets.eval =
        std::make_unique<ShapesDataset>(config.seed, image_size, Split::kEval, config.eval_samples);
  }
  return datasets;
}

absl::StatusOr<Datasets> OpenJsonl(const JsonlConfig& config, int64_t image_size,
                                   const std::string& spec_dir) {
  if (config.train_path.empty()) {
    return absl::InvalidArgumentError("jsonl data: train_path is empty");
  }
  Datasets datasets;
  ASSIGN_OR_RETURN(datasets.train,
                   JsonlDataset::Open(Resolve(config.train_path, spec_dir), image_size));
  if (!config.eval_path.empty()) {
    ASSIGN_OR_RETURN(datasets.eval,
                     JsonlDataset::Open(Resolve(config.eval_path, spec_dir), image_size));
  }
  return datasets;
}

}  // namespace

Dataset::~Dataset() = default;

std::vector<std::string> AllTexts(const Dataset& dataset) {
  std::vector<std::string> texts;
  texts.reserve(dataset.size());
  for (int64_t i = 0; i < dataset.size(); ++i) texts.push_back(dataset.Text(i));
  return texts;
}

absl::StatusOr<Datasets> OpenDatasets(const DataConfig& config, int64_t image_size,
                                      const std::string& spec_dir) {
  if (image_size <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("image_size must be positive, got ", image_size));
  }
  switch (config.kind) {
    case DataConfig::Kind::kShapes:
      return OpenShapes(config.shapes, image_size);
    case DataConfig::Kind::kJsonl:
      return OpenJsonl(config.jsonl, image_size, spec_dir);
  }
  return absl::InvalidArgumentError("unknown data kind");
}

}  // namespace tandem::data
