// A dataset of conversation files (data/conversation.h): sample i is the i-th conversation and its
// images (none, one, several, or a video's sampled frames). The file is read and checked whole at
// Open, and every image must exist then; images are decoded in Get and GetImage, as JsonlDataset
// does (data/jsonl_dataset.h).
//
// Thread-safety: immutable after Open but for a cache of image sizes behind a mutex; Get, GetImage,
// GetTiles and ImageSize may be called concurrently.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "absl/status/statusor.h"
#include "data/conversation.h"
#include "data/dataset.h"

namespace tandem::data {

// data.max_images_per_sample and data.video_frames (data/data_config.h).
struct ConversationLimits {
  int64_t max_images_per_sample = 1;
  int64_t video_frames = 8;
};

class ConversationDataset final : public Dataset {
 public:
  // Errors of ReadConversations; InvalidArgument "<source>: has 3 images, more than
  // data.max_images_per_sample = 2"; NotFound naming the entry and the image file; InvalidArgument
  // for an image outside the file's directory unless allow_images_outside
  // (data.allow_images_outside).
  static absl::StatusOr<std::unique_ptr<ConversationDataset>> Open(
      const std::string& path, int64_t image_size,
      std::shared_ptr<const ImagePreprocessor> preprocessor = nullptr,
      bool allow_images_outside = false, ConversationLimits limits = {});

  int64_t size() const override { return static_cast<int64_t>(conversations_.size()); }
  absl::StatusOr<Example> Get(int64_t index) const override;
  int64_t ImageCount(int64_t index) const override {
    return static_cast<int64_t>(conversations_[index].images.size());
  }
  absl::StatusOr<Image> GetImage(int64_t index, int64_t image) const override;
  absl::StatusOr<std::vector<Image>> GetTiles(int64_t index, int64_t image) const override;
  // Read once a file (header only), then remembered.
  absl::StatusOr<Resolution> ImageSize(int64_t index, int64_t image) const override;
  std::string Text(int64_t index) const override;
  std::vector<tokenizer::ChatMessage> Messages(int64_t index) const override {
    return conversations_[index].messages;
  }
  std::string Describe(int64_t index) const override { return conversations_[index].source; }

 private:
  // The file of image `image` of sample `index`, or OutOfRange naming what is outside.
  absl::StatusOr<std::string> ImagePath(int64_t index, int64_t image) const;

  ConversationDataset(std::vector<Conversation> conversations, int64_t image_size,
                      std::shared_ptr<const ImagePreprocessor> preprocessor)
      : conversations_(std::move(conversations)),
        image_size_(image_size),
        preprocessor_(std::move(preprocessor)) {}

  std::vector<Conversation> conversations_;
  int64_t image_size_;
  std::shared_ptr<const ImagePreprocessor> preprocessor_;
  // ImageSize's answers by file: every rank plans every micro-batch from them, each step.
  mutable std::mutex sizes_mutex_;
  mutable std::unordered_map<std::string, Resolution> sizes_;
};

}  // namespace tandem::data
