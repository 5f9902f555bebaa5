#include "data/conversation_dataset.h"

#include <filesystem>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "data/dataset.h"
#include "data/text_codec.h"

namespace tandem::data {

absl::StatusOr<std::unique_ptr<ConversationDataset>> ConversationDataset::Open(
    const std::string& path, int64_t image_size,
    std::shared_ptr<const ImagePreprocessor> preprocessor, bool allow_images_outside,
    ConversationLimits limits) {
  ASSIGN_OR_RETURN(std::vector<Conversation> conversations,
                   ReadConversations(path, limits.video_frames));
  const ImageFolder folder(std::filesystem::path(path).parent_path().string());
  for (const Conversation& c : conversations) {
    const int64_t images = static_cast<int64_t>(c.images.size());
    if (images > limits.max_images_per_sample) {
      return absl::InvalidArgumentError(
          absl::StrCat(c.source, ": has ", images, c.video ? " frames" : " images",
                       ", more than data.max_images_per_sample = ", limits.max_images_per_sample));
    }
    for (const std::string& image : c.images) {
      if (!allow_images_outside) RETURN_IF_ERROR(folder.CheckInside(image, c.source));
      std::error_code ec;
      if (!std::filesystem::is_regular_file(image, ec)) {
        return absl::NotFoundError(absl::StrCat(c.source, ": image ", image, " is not a file"));
      }
    }
  }
  return std::unique_ptr<ConversationDataset>(
      new ConversationDataset(std::move(conversations), image_size, std::move(preprocessor)));
}

absl::StatusOr<Example> ConversationDataset::Get(int64_t index) const {
  return FirstImageExample(*this, index, "conversations");
}

absl::StatusOr<std::string> ConversationDataset::ImagePath(int64_t index, int64_t image) const {
  RETURN_IF_ERROR(CheckImageIndex(*this, index, image, "conversations"));
  const Conversation& c = conversations_[index];
  return c.images[image];
}

namespace {

// `status` with the sample's source before its message.
absl::Status Named(const std::string& source, const absl::Status& status) {
  return absl::Status(status.code(), absl::StrCat(source, ": ", status.message()));
}

}  // namespace

absl::StatusOr<Image> ConversationDataset::GetImage(int64_t index, int64_t image) const {
  ASSIGN_OR_RETURN(const std::string path, ImagePath(index, image));
  absl::StatusOr<Image> loaded = LoadSampleImage(path, image_size_, preprocessor_.get());
  if (!loaded.ok()) return Named(Describe(index), loaded.status());
  return loaded;
}

absl::StatusOr<std::vector<Image>> ConversationDataset::GetTiles(int64_t index,
                                                                 int64_t image) const {
  if (preprocessor_ == nullptr || !preprocessor_->any_res()) return Dataset::GetTiles(index, image);
  ASSIGN_OR_RETURN(const std::string path, ImagePath(index, image));
  absl::StatusOr<Image> decoded = DecodeImageFile(path, MaxPixelsFor(image_size_));
  if (!decoded.ok()) return Named(Describe(index), decoded.status());
  absl::StatusOr<std::vector<Image>> tiles = PreprocessTiles(*preprocessor_, *decoded);
  if (!tiles.ok()) return Named(Describe(index), Named(path, tiles.status()));
  return tiles;
}

absl::StatusOr<Resolution> ConversationDataset::ImageSize(int64_t index, int64_t image) const {
  ASSIGN_OR_RETURN(const std::string path, ImagePath(index, image));
  {
    std::lock_guard<std::mutex> lock(sizes_mutex_);
    if (const auto it = sizes_.find(path); it != sizes_.end()) return it->second;
  }
  absl::StatusOr<Resolution> size = ReadImageSize(path);
  if (!size.ok()) return Named(Describe(index), size.status());
  std::lock_guard<std::mutex> lock(sizes_mutex_);
  sizes_.emplace(path, *size);
  return size;
}

std::string ConversationDataset::Text(int64_t index) const {
  return ConversationWords(conversations_[index].messages);
}

}  // namespace tandem::data
