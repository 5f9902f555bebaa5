// A dataset of LLaVA conversation files (data/conversation.h): sample i is the i-th conversation
// and its image. The file is read and checked whole at Open, and every image must exist then;
// images are decoded in Get, as JsonlDataset does (data/jsonl_dataset.h). A conversation without an
// image is refused: every sample of a job crosses the vision group.
//
// Thread-safety: immutable after Open; Get may be called concurrently.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "data/conversation.h"
#include "data/dataset.h"

namespace tandem::data {

class ConversationDataset final : public Dataset {
 public:
  // Errors of ReadConversations; InvalidArgument "<source>: has no image" or NotFound naming the
  // entry and the image file; InvalidArgument for an image outside the file's directory unless
  // allow_images_outside (data.allow_images_outside).
  static absl::StatusOr<std::unique_ptr<ConversationDataset>> Open(
      const std::string& path, int64_t image_size,
      std::shared_ptr<const ImagePreprocessor> preprocessor = nullptr,
      bool allow_images_outside = false);

  int64_t size() const override { return static_cast<int64_t>(conversations_.size()); }
  absl::StatusOr<Example> Get(int64_t index) const override;
  std::string Text(int64_t index) const override;
  std::vector<tokenizer::ChatMessage> Messages(int64_t index) const override {
    return conversations_[index].messages;
  }
  std::string Describe(int64_t index) const override { return conversations_[index].source; }

 private:
  ConversationDataset(std::vector<Conversation> conversations, int64_t image_size,
                      std::shared_ptr<const ImagePreprocessor> preprocessor)
      : conversations_(std::move(conversations)),
        image_size_(image_size),
        preprocessor_(std::move(preprocessor)) {}

  std::vector<Conversation> conversations_;
  int64_t image_size_;
  std::shared_ptr<const ImagePreprocessor> preprocessor_;
};

}  // namespace tandem::data
