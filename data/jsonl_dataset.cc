#include "data/jsonl_dataset.h"

#include <filesystem>
#include <string_view>
#include <system_error>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/atomic_file.h"
#include "common/status_macros.h"
#include "common/strict_json.h"
#include "data/dataset.h"
#include "nlohmann/json.hpp"

namespace tandem::data {
namespace {

namespace fs = std::filesystem;

bool IsBlank(std::string_view line) {
  return line.find_first_not_of(" \t\r\f\v") == std::string_view::npos;
}

// The value of a required, non-empty string key, or an error message.
absl::StatusOr<std::string> StringField(const nlohmann::json& object, const char* key,
                                        const std::string& where) {
  const auto it = object.find(key);
  if (it == object.end()) {
    return absl::InvalidArgumentError(absl::StrCat(where, "missing key \"", key, "\""));
  }
  if (!it->is_string()) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, "\"", key, "\" must be a string, not ", it->type_name()));
  }
  std::string value = it->get<std::string>();
  if (value.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(where, "\"", key, "\" is empty"));
  }
  return value;
}

}  // namespace

absl::StatusOr<std::unique_ptr<JsonlDataset>> JsonlDataset::Open(
    const std::string& jsonl_path, int64_t image_size,
    std::shared_ptr<const ImagePreprocessor> preprocessor, bool allow_images_outside) {
  ASSIGN_OR_RETURN(const std::string contents, ReadUserFile(jsonl_path));
  const fs::path directory = fs::path(jsonl_path).parent_path();
  const ImageFolder folder(directory.string());
  std::vector<Sample> samples;
  int64_t line_number = 0;
  for (size_t begin = 0; begin < contents.size();) {
    size_t end = contents.find('\n', begin);
    if (end == std::string::npos) end = contents.size();
    std::string_view line(contents.data() + begin, end - begin);
    begin = end + 1;
    ++line_number;
    if (IsBlank(line)) continue;
    if (line.ends_with('\r')) line.remove_suffix(1);

    const std::string line_at = absl::StrCat(jsonl_path, ":", line_number);
    const std::string where = line_at + ": ";
    absl::StatusOr<nlohmann::json> parsed = ParseJsonStrict(line);
    if (!parsed.ok()) {
      // "line 1, column 36: invalid JSON: ..." of a one-line document: the file's line is in
      // `where`.
      absl::string_view message = parsed.status().message();
      if (absl::StartsWith(message, "line 1, ")) message.remove_prefix(8);
      return absl::InvalidArgumentError(absl::StrCat(where, message));
    }
    const nlohmann::json& object = *parsed;
    if (!object.is_object()) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, "expected a JSON object, got ", object.type_name()));
    }
    for (const auto& [key, value] : object.items()) {
      if (key != "image" && key != "text") {
        return absl::InvalidArgumentError(absl::StrCat(
            where, "unknown key \"", key, "\" (a sample has exactly \"image\" and \"text\")"));
      }
    }
    Sample sample;
    sample.line = line_number;
    ASSIGN_OR_RETURN(sample.image, StringField(object, "image", where));
    ASSIGN_OR_RETURN(sample.text, StringField(object, "text", where));
    // A file name ends at a NUL for the system: what follows it would be dropped unseen.
    if (sample.image.find('\0') != std::string::npos) {
      return absl::InvalidArgumentError(absl::StrCat(where, "\"image\" contains a NUL character"));
    }
    const fs::path image(sample.image);
    sample.image_path =
        (image.is_absolute() ? image : directory / image).lexically_normal().string();

    std::error_code error;
    const fs::file_status status = fs::status(sample.image_path, error);
    if (!fs::exists(status)) {
      return absl::NotFoundError(
          absl::StrCat(where, "image file ", sample.image_path, " does not exist"));
    }
    if (!fs::is_regular_file(status)) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, "image ", sample.image_path, " is not a regular file"));
    }
    if (!allow_images_outside) RETURN_IF_ERROR(folder.CheckInside(sample.image_path, line_at));
    samples.push_back(std::move(sample));
  }
  if (samples.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(jsonl_path, ": no samples (the file is empty or has only blank lines)"));
  }
  return std::unique_ptr<JsonlDataset>(
      new JsonlDataset(jsonl_path, image_size, std::move(samples), std::move(preprocessor)));
}

absl::StatusOr<Example> JsonlDataset::Get(int64_t index) const {
  if (index < 0 || index >= size()) {
    return absl::OutOfRangeError(
        absl::StrCat(jsonl_path_, ": index ", index, " outside [0, ", size(), ")"));
  }
  const Sample& sample = samples_[index];
  absl::StatusOr<Image> image =
      LoadSampleImage(sample.image_path, image_size_, preprocessor_.get());
  if (!image.ok()) {
    return absl::Status(image.status().code(), absl::StrCat(jsonl_path_, ":", sample.line, ": ",
                                                            image.status().message()));
  }
  return Example{*std::move(image), sample.text};
}

std::string JsonlDataset::Describe(int64_t index) const {
  const Sample& sample = samples_[index];
  return absl::StrCat(jsonl_path_, ":", sample.line, " (", sample.image, ")");
}

}  // namespace tandem::data
