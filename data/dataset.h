// Datasets of (image, caption) pairs or of conversations about an image, and the factory that opens
// them from a DataConfig (data/data_config.h).
//
// A Dataset is an immutable, indexable collection: sample i is the same on every call and in every
// process that opened the same data, so data order is entirely the Sampler's business
// (data/sampler.h) and a checkpoint only needs the sampler position. Most are held whole; a
// sharded one (data/shard_dataset.h) reads its shards' tables when asked and keeps a bounded few.
//
// Thread-safety: all methods are const and may be called from several threads at once (a sharded
// data set's cache is behind a mutex).
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "data/data_config.h"
#include "data/image.h"
#include "data/image_preprocessor.h"
#include "data/sampler.h"
#include "data/shard_manifest.h"
#include "data/tokenizer.h"
#include "tokenizer/chat_template.h"

namespace tandem::data {

struct Example {
  Image image;       // the first image, 3 x image_size x image_size, values in [0, 1]; no pixels
                     // for a sample without one
  std::string text;  // the caption, as stored (tokenisation happens in data/tokenizer.h)
};

class Dataset {
 public:
  virtual ~Dataset();

  virtual int64_t size() const = 0;

  // Makes sample `index` ready and says whether it can be read: a data set read lazily reads and
  // checks its shard's table here, its errors naming the shard, the key and the byte offset. Text,
  // Messages, ImageCount and Describe cannot report an error: callers Check first (a sample that
  // fails later, its file changed under the run, reads as text-only and empty).
  virtual absl::Status Check(int64_t index) const { return absl::OkStatus(); }

  // Samples of each shard, in index order (data/sampler.h: SampleOrder); one shard for a data set
  // held whole.
  virtual std::vector<int64_t> ShardSizes() const { return {size()}; }
  // The shards a checkpoint records (data/shard_manifest.h); none for a data set held whole.
  virtual std::vector<ShardInfo> Shards() const { return {}; }
  // Whether the shard holding sample `index` is still the one indexed: its CRC-32 against the
  // index's. DataLoss naming the shard otherwise; OK where no checksum is known. Reads the whole
  // shard: for a resume, not for every read.
  virtual absl::Status VerifyShard(int64_t index) const { return absl::OkStatus(); }

  // The sample at `index`, its image resized to the dataset's image size. OutOfRange outside
  // [0, size()); other errors (an undecodable file) name the sample as Describe does.
  virtual absl::StatusOr<Example> Get(int64_t index) const = 0;

  // The images of sample `index`, in the order of its "<image>" marks: 0 for a text-only sample,
  // a video's sampled frames for a video. Cheap (nothing is decoded). REQUIRES: 0 <= index <
  // size().
  virtual int64_t ImageCount(int64_t index) const { return 1; }
  // Image `image` of sample `index`, resized as Get resizes: OutOfRange outside [0,
  // ImageCount(index)); otherwise Get's errors. The default serves one image a sample from Get.
  virtual absl::StatusOr<Image> GetImage(int64_t index, int64_t image) const;
  // Image `image` as the vision model reads it: with LLaVA-NeXT's image_grid_pinpoints in the
  // preprocessor, its tiles (data/any_res.h: the base, then the grid row by row); otherwise the one
  // GetImage gives. GetImage's errors.
  virtual absl::StatusOr<std::vector<Image>> GetTiles(int64_t index, int64_t image) const;
  // The size image `image` has on file (ReadImageSize: its header, not its pixels), which decides
  // its tiles; the default decodes it through GetImage. GetImage's errors.
  virtual absl::StatusOr<Resolution> ImageSize(int64_t index, int64_t image) const;

  // The caption alone, without touching the image: cheap, for building the tokenizer. A
  // conversation's text is ConversationWords of its messages (data/text_codec.h).
  // REQUIRES: 0 <= index < size().
  virtual std::string Text(int64_t index) const = 0;

  // The sample as the conversation the LLM trains on (data/text_codec.h). A caption is the answer
  // to a user turn holding only the image: {user: "<image>"}, {assistant: caption}. REQUIRES: 0 <=
  // index < size().
  virtual std::vector<tokenizer::ChatMessage> Messages(int64_t index) const;

  // The texts a word tokenizer built for this dataset covers: AllTexts. The shapes dataset adds the
  // words of its conversations, so one vocabulary serves its captions and its conversations.
  virtual std::vector<std::string> VocabularyTexts() const;
  // The words of VocabularyTexts counted (Tokenizer::FromCounts): what a word tokenizer is built
  // from. A sharded data set reads them from its index, or counts them shard by shard.
  virtual WordCounts VocabularyCounts() const;

  // Where the sample comes from, for error messages: "train.jsonl:12 (images/cat.png)",
  // "shapes train #12 (seed 0)".
  virtual std::string Describe(int64_t index) const = 0;
};

// Get for a dataset of samples with any number of images: its text and its first image (no pixels
// for none); OutOfRange "<kind>: index 7 outside [0, 5)".
absl::StatusOr<Example> FirstImageExample(const Dataset& dataset, int64_t index,
                                          std::string_view kind);

// OutOfRange "<kind>: index 7 outside [0, 5)" or "<Describe(index)>: image 2 outside [0, 2)".
absl::Status CheckImageIndex(const Dataset& dataset, int64_t index, int64_t image,
                             std::string_view kind);

// Every caption in index order (Text(0), Text(1), ...).
std::vector<std::string> AllTexts(const Dataset& dataset);

struct Datasets {
  std::unique_ptr<Dataset> train;
  std::unique_ptr<Dataset> eval;  // null when there is no held-out set
};

// Opens the job's datasets with images of image_size x image_size: files are resized by
// `preprocessor` when given (a pretrained tower's, data/image_preprocessor.h), else stretched by
// ResizeBilinear.
//   shapes: train = ShapesDataset(seed, image_size, kTrain, train_samples), eval likewise with
//   kEval
//           and eval_samples (null when eval_samples is 0).
//   jsonl, conversations: train_path and, when set, eval_path (a relative path is the working
//           directory's; a spec read from a file has made them absolute); eval is null without
//           eval_path.
//   shards: ShardDataset::Open of the train and eval patterns.
//   mixture: a MixtureDataset of each source's train set (its kind's as above, with this config's
//           other fields), and one of those sources' eval sets that exist (null for none).
// InvalidArgument for a non-positive image_size or sample count, or an empty train_path; otherwise
// the errors of JsonlDataset::Open, ConversationDataset::Open or ShardDataset::Open, a mixture's
// prefixed "data.mixture source NAME: ".
absl::StatusOr<Datasets> OpenDatasets(
    const DataConfig& config, int64_t image_size,
    std::shared_ptr<const ImagePreprocessor> preprocessor = nullptr);

// How `train`, opened from `config`, is shuffled (data/sampler.h): its shards windowed by
// data.shards.shuffle_buffer, or shuffled whole, or a mixture of its sources' orders by weight.
SampleOrder TrainOrder(const DataConfig& config, const Dataset& train);

// Checks that a data file's images lie inside its folder, as the file system resolves them
// (common/paths.h), the folder resolved once. An image outside is InvalidArgument "<where>: image
// <image> is outside <folder> ...", which names the spec key that allows it
// (data.allow_images_outside); a folder that cannot be resolved is the same for every image.
class ImageFolder {
 public:
  explicit ImageFolder(std::string folder);
  absl::Status CheckInside(const std::string& image, const std::string& where) const;

 private:
  std::string folder_;
  std::optional<std::filesystem::path> resolved_;
};

// An image file as a dataset sample: decoded, then preprocessed (when given) or stretched to
// image_size. Errors name the file.
// As LoadSampleImage, of a file's bytes already in memory (a tar shard's member); `name` is used
// in error messages.
absl::StatusOr<Image> LoadSampleImageBytes(std::string_view bytes, const std::string& name,
                                           int64_t image_size,
                                           const ImagePreprocessor* preprocessor);
absl::StatusOr<Image> LoadSampleImage(const std::string& path, int64_t image_size,
                                      const ImagePreprocessor* preprocessor);

}  // namespace tandem::data
