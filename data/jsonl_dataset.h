// A dataset of real images listed in a JSON Lines file (docs/design.md §4), one sample per line:
//   {"image": "images/cat.png", "text": "a cat on a mat"}
//
// Open reads and validates every line up front, so a bad file fails the job at start rather than
// hours in. Rules, each violation an InvalidArgument "<jsonl path>:<line>: <what>":
//   * lines are numbered from 1; blank (whitespace-only) lines are skipped, so a trailing newline
//   or
//     a spacer line is harmless; a trailing "\r" (CRLF files) is ignored;
//   * every other line is one JSON object with exactly the keys "image" and "text", both non-empty
//     strings (a missing, non-string or unknown key is an error: typos must not pass silently);
//   * "image" is absolute or relative to the directory of the jsonl file (not the working
//     directory), and must exist as a regular file at Open: NotFound otherwise, naming both;
//   * at least one sample.
// Images are decoded in Get (PNG or JPEG, data/image.h) and resized to image_size x image_size by
// LoadSampleImage (data/dataset.h). A decoding error keeps its code and is prefixed
// with the jsonl line: "train.jsonl:12: images/cat.png: corrupt PNG: ...".
//
// Thread-safety: immutable after Open; Get may be called concurrently.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "data/dataset.h"

namespace tandem::data {

class JsonlDataset final : public Dataset {
 public:
  // REQUIRES: image_size > 0.
  // `preprocessor` (may be null): as OpenDatasets. An image outside the jsonl file's directory is
  // InvalidArgument naming its line unless allow_images_outside (data.allow_images_outside).
  static absl::StatusOr<std::unique_ptr<JsonlDataset>> Open(
      const std::string& jsonl_path, int64_t image_size,
      std::shared_ptr<const ImagePreprocessor> preprocessor = nullptr,
      bool allow_images_outside = false);

  int64_t size() const override { return static_cast<int64_t>(samples_.size()); }
  absl::StatusOr<Example> Get(int64_t index) const override;
  std::string Text(int64_t index) const override { return samples_[index].text; }
  // "<jsonl path>:<line> (<image as written in the file>)".
  std::string Describe(int64_t index) const override;

  // The image path after resolution against the jsonl file's directory.
  const std::string& ImagePath(int64_t index) const { return samples_[index].image_path; }

 private:
  struct Sample {
    int64_t line = 0;        // 1-based line in the jsonl file
    std::string image;       // as written
    std::string image_path;  // resolved
    std::string text;
  };

  JsonlDataset(std::string jsonl_path, int64_t image_size, std::vector<Sample> samples,
               std::shared_ptr<const ImagePreprocessor> preprocessor)
      : jsonl_path_(std::move(jsonl_path)),
        image_size_(image_size),
        samples_(std::move(samples)),
        preprocessor_(std::move(preprocessor)) {}

  std::string jsonl_path_;
  int64_t image_size_;
  std::vector<Sample> samples_;
  std::shared_ptr<const ImagePreprocessor> preprocessor_;
};

}  // namespace tandem::data
