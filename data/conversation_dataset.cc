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
    std::shared_ptr<const ImagePreprocessor> preprocessor, bool allow_images_outside) {
  ASSIGN_OR_RETURN(std::vector<Conversation> conversations, ReadConversations(path));
  const ImageFolder folder(std::filesystem::path(path).parent_path().string());
  for (const Conversation& c : conversations) {
    if (c.image.empty())
      return absl::InvalidArgumentError(absl::StrCat(c.source, ": has no image"));
    if (!allow_images_outside) RETURN_IF_ERROR(folder.CheckInside(c.image, c.source));
    std::error_code ec;
    if (!std::filesystem::is_regular_file(c.image, ec)) {
      return absl::NotFoundError(absl::StrCat(c.source, ": image ", c.image, " is not a file"));
    }
  }
  return std::unique_ptr<ConversationDataset>(
      new ConversationDataset(std::move(conversations), image_size, std::move(preprocessor)));
}

absl::StatusOr<Example> ConversationDataset::Get(int64_t index) const {
  if (index < 0 || index >= size()) {
    return absl::OutOfRangeError(
        absl::StrCat("conversations: index ", index, " outside [0, ", size(), ")"));
  }
  const Conversation& c = conversations_[index];
  absl::StatusOr<Image> image = LoadSampleImage(c.image, image_size_, preprocessor_.get());
  if (!image.ok()) {
    return absl::Status(image.status().code(),
                        absl::StrCat(c.source, ": ", image.status().message()));
  }
  return Example{*std::move(image), Text(index)};
}

std::string ConversationDataset::Text(int64_t index) const {
  return ConversationWords(conversations_[index].messages);
}

}  // namespace tandem::data
