// A dataset of tar shards in WebDataset's layout (data/tar_shard.h): sample i is the i-th sample of
// the shards in order, each a key with a "json" member (its text) and image members.
//
//   KEY.json    {"conversations": [...]} (LLaVA) or {"messages": [...]} (ShareGPT), as in
//               conversation files (data/conversation.h), or {"caption": "..."} / {"text": "..."}
//               for a caption of one image. Image file names in it are not read: the sample's
//               image members are its images.
//   KEY.png     one image (also jpg, jpeg), or KEY.0.png, KEY.1.png, ... several, in that order,
//               one for each "<image>" mark.
// Other members (KEY.txt, KEY.cls, ...) are ignored.
//
// Shards are named by paths or brace ranges, as WebDataset writes them:
// "shards/train-{000000..000099}.tar" is 100 shards (ExpandShardPattern), or by the directory
// `tandem data pack` wrote (data/shard_pack.h), whose index.json names them.
//
// Open scans every shard's headers and reads and checks every sample's text: errors name the
// shard, the key and the byte offset of its member (a sample without its text, a JSON error, marks
// that differ from the images, more images than data.max_images_per_sample). Images are read from
// their shard when asked for, each rank reading only its own.
//
// Thread-safety: immutable after Open but for a cache of image sizes behind a mutex.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "data/conversation.h"
#include "data/dataset.h"
#include "data/tar_shard.h"

namespace tandem::data {

// The shard paths a pattern names: itself, or one path a number of each "{FIRST..LAST}" range
// (digits; the width of FIRST is kept, as in "{000000..000099}"). InvalidArgument naming the
// pattern for an unclosed brace, a range whose ends are not numbers or LAST < FIRST.
absl::StatusOr<std::vector<std::string>> ExpandShardPattern(const std::string& pattern);

class ShardDataset final : public Dataset {
 public:
  static absl::StatusOr<std::unique_ptr<ShardDataset>> Open(
      const std::vector<std::string>& patterns, int64_t image_size,
      std::shared_ptr<const ImagePreprocessor> preprocessor = nullptr,
      int64_t max_images_per_sample = 1);

  int64_t size() const override { return static_cast<int64_t>(samples_.size()); }
  absl::StatusOr<Example> Get(int64_t index) const override;
  int64_t ImageCount(int64_t index) const override {
    return static_cast<int64_t>(samples_[index].images.size());
  }
  absl::StatusOr<Image> GetImage(int64_t index, int64_t image) const override;
  absl::StatusOr<std::vector<Image>> GetTiles(int64_t index, int64_t image) const override;
  absl::StatusOr<Resolution> ImageSize(int64_t index, int64_t image) const override;
  std::string Text(int64_t index) const override;
  std::vector<tokenizer::ChatMessage> Messages(int64_t index) const override;
  // "shards/train-000003.tar: 000012 (byte 5120)"
  std::string Describe(int64_t index) const override;

 private:
  struct Sample {
    int shard = 0;
    std::string key;
    int64_t offset = 0;             // of its text member's header
    std::vector<TarMember> images;  // in mark order
    std::string caption;            // a caption sample's text; empty for a conversation
    std::vector<tokenizer::ChatMessage> messages;  // a conversation's
  };

  ShardDataset(std::vector<std::string> shards, std::vector<Sample> samples, int64_t image_size,
               std::shared_ptr<const ImagePreprocessor> preprocessor)
      : shards_(std::move(shards)),
        samples_(std::move(samples)),
        image_size_(image_size),
        preprocessor_(std::move(preprocessor)) {}

  // Image `image`'s bytes and its name for errors ("train-000003.tar: 000012.0.png").
  absl::StatusOr<std::pair<std::string, std::string>> ImageBytes(int64_t index,
                                                                 int64_t image) const;

  std::vector<std::string> shards_;
  std::vector<Sample> samples_;
  int64_t image_size_;
  std::shared_ptr<const ImagePreprocessor> preprocessor_;
  mutable std::mutex sizes_mutex_;
  mutable std::map<std::pair<int64_t, int64_t>, Resolution> sizes_;  // by (sample, image)
};

}  // namespace tandem::data
