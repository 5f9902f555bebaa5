#include "data/shard_dataset.h"

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/atomic_file.h"
#include "common/status_macros.h"
#include "common/strict_json.h"
#include "data/text_codec.h"

namespace tandem::data {
namespace {

using nlohmann::json;

bool IsImageField(const std::string& field) {
  const size_t dot = field.rfind('.');
  std::string extension = field.substr(dot == std::string::npos ? 0 : dot + 1);
  std::transform(extension.begin(), extension.end(), extension.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return extension == "png" || extension == "jpg" || extension == "jpeg";
}

// The number before a field's first dot ("0.png" -> 0), or -1 for a single image ("png").
int64_t ImageNumber(const std::string& field) {
  const size_t dot = field.find('.');
  if (dot == std::string::npos || dot == 0) return -1;
  int64_t number = 0;
  for (size_t i = 0; i < dot; ++i) {
    if (!std::isdigit(static_cast<unsigned char>(field[i])) || number > 1'000'000) return -1;
    number = number * 10 + (field[i] - '0');
  }
  return number;
}

// A directory `tandem data pack` wrote: the pattern its index.json names, inside it; any other
// name as it is.
absl::StatusOr<std::string> IndexedPattern(const std::string& named) {
  std::error_code ec;
  if (!std::filesystem::is_directory(named, ec)) return named;
  const std::string index_path = (std::filesystem::path(named) / "index.json").string();
  ASSIGN_OR_RETURN(const std::string text, ReadUserFile(index_path));
  absl::StatusOr<json> index = ParseJsonStrict(text);
  if (!index.ok() || !index->is_object() || !index->contains("pattern") ||
      !(*index)["pattern"].is_string()) {
    return absl::InvalidArgumentError(
        absl::StrCat(index_path,
                     ": not a shard index (tandem data pack writes one with a "
                     "\"pattern\" string)"));
  }
  return (std::filesystem::path(named) / (*index)["pattern"].get<std::string>()).string();
}

}  // namespace

absl::StatusOr<std::vector<std::string>> ExpandShardPattern(const std::string& pattern) {
  const size_t open = pattern.find('{');
  if (open == std::string::npos) {
    if (pattern.find('}') != std::string::npos)
      return absl::InvalidArgumentError(
          absl::StrCat("shard pattern ", pattern, ": '}' without '{'"));
    return std::vector<std::string>{pattern};
  }
  const size_t close = pattern.find('}', open);
  const size_t dots = pattern.find("..", open);
  const auto bad = [&](const std::string& why) {
    return absl::InvalidArgumentError(
        absl::StrCat("shard pattern ", pattern, ": ", why, " (write a range as {000000..000099})"));
  };
  if (close == std::string::npos) return bad("'{' is not closed");
  if (dots == std::string::npos || dots > close) return bad("no '..' in its braces");
  const std::string first = pattern.substr(open + 1, dots - open - 1);
  const std::string last = pattern.substr(dots + 2, close - dots - 2);
  const auto number = [](const std::string& s) {
    return !s.empty() && s.size() <= 9 &&
           std::all_of(s.begin(), s.end(), [](unsigned char c) { return std::isdigit(c); });
  };
  if (!number(first) || !number(last)) return bad("the ends of its range are not numbers");
  const int64_t from = std::stoll(first), to = std::stoll(last);
  if (to < from)
    return bad(absl::StrCat("its range ends before it begins (", to, " < ", from, ")"));
  ASSIGN_OR_RETURN(const std::vector<std::string> rests,
                   ExpandShardPattern(pattern.substr(close + 1)));
  std::vector<std::string> out;
  for (int64_t n = from; n <= to; ++n) {
    std::string digits = std::to_string(n);
    if (digits.size() < first.size()) digits.insert(0, first.size() - digits.size(), '0');
    for (const std::string& rest : rests)
      out.push_back(absl::StrCat(pattern.substr(0, open), digits, rest));
  }
  return out;
}

absl::StatusOr<std::unique_ptr<ShardDataset>> ShardDataset::Open(
    const std::vector<std::string>& patterns, int64_t image_size,
    std::shared_ptr<const ImagePreprocessor> preprocessor, int64_t max_images_per_sample) {
  std::vector<std::string> shards;
  for (const std::string& named : patterns) {
    ASSIGN_OR_RETURN(const std::string pattern, IndexedPattern(named));
    ASSIGN_OR_RETURN(std::vector<std::string> paths, ExpandShardPattern(pattern));
    shards.insert(shards.end(), paths.begin(), paths.end());
  }
  if (shards.empty()) return absl::InvalidArgumentError("data.shards: no shard named");
  std::vector<Sample> samples;
  for (size_t s = 0; s < shards.size(); ++s) {
    const std::string& path = shards[s];
    ASSIGN_OR_RETURN(std::vector<TarMember> members, ScanTar(path));
    ASSIGN_OR_RETURN(std::vector<TarSample> grouped, GroupTarSamples(path, std::move(members)));
    for (TarSample& tar : grouped) {
      Sample sample;
      sample.shard = static_cast<int>(s);
      sample.key = tar.key;
      const std::string where = absl::StrCat(path, ": ", tar.key);
      const TarMember* text = nullptr;
      std::vector<std::pair<int64_t, size_t>> numbered;  // (number, member), for the order
      for (size_t m = 0; m < tar.members.size(); ++m) {
        if (tar.fields[m] == "json") text = &tar.members[m];
        if (IsImageField(tar.fields[m])) numbered.emplace_back(ImageNumber(tar.fields[m]), m);
      }
      if (text == nullptr) {
        return absl::InvalidArgumentError(
            absl::StrCat(where, " (byte ", tar.members.front().header_offset,
                         "): has no json member (its text: ", tar.key, ".json)"));
      }
      sample.offset = text->header_offset;
      std::stable_sort(numbered.begin(), numbered.end());
      for (const auto& [number, m] : numbered) sample.images.push_back(tar.members[m]);
      const int64_t images = static_cast<int64_t>(sample.images.size());
      const std::string source = absl::StrCat(where, " (byte ", sample.offset, ")");
      if (images > max_images_per_sample) {
        return absl::InvalidArgumentError(absl::StrCat(source, ": has ", images,
                                                       " images, more than "
                                                       "data.max_images_per_sample = ",
                                                       max_images_per_sample));
      }
      ASSIGN_OR_RETURN(const std::string bytes, ReadTarMember(path, *text));
      absl::StatusOr<json> parsed = ParseJsonStrict(bytes);
      if (!parsed.ok()) {
        return absl::InvalidArgumentError(absl::StrCat(source, ": ", parsed.status().message()));
      }
      if (parsed->is_object() && !parsed->contains("conversations") &&
          !parsed->contains("messages")) {
        const char* key = parsed->contains("caption") ? "caption" : "text";
        if (!parsed->contains(key) || !(*parsed)[key].is_string() || images != 1) {
          return absl::InvalidArgumentError(
              absl::StrCat(source,
                           ": must hold \"conversations\" or \"messages\", or a \"caption\" (or "
                           "\"text\") string with one image; it has ",
                           images, images == 1 ? " image" : " images"));
        }
        sample.caption = (*parsed)[key].get<std::string>();
      } else {
        // The marks take the sample's image members: name them in place of any file names.
        if (parsed->is_object()) {
          parsed->erase("image");
          parsed->erase("images");
          parsed->erase("video");
          json names = json::array();
          for (const TarMember& image : sample.images) names.push_back(image.name);
          if (images > 0) (*parsed)[parsed->contains("messages") ? "images" : "image"] = names;
        }
        ASSIGN_OR_RETURN(Conversation conversation,
                         ParseConversation(parsed->dump(), source, /*base=*/""));
        sample.messages = std::move(conversation.messages);
      }
      samples.push_back(std::move(sample));
    }
  }
  if (samples.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("data.shards: ", shards.size(), " shards and no sample in them"));
  }
  return std::unique_ptr<ShardDataset>(
      new ShardDataset(std::move(shards), std::move(samples), image_size, std::move(preprocessor)));
}

std::string ShardDataset::Describe(int64_t index) const {
  const Sample& s = samples_[index];
  return absl::StrCat(shards_[s.shard], ": ", s.key, " (byte ", s.offset, ")");
}

std::string ShardDataset::Text(int64_t index) const {
  const Sample& s = samples_[index];
  return s.messages.empty() ? s.caption : ConversationWords(s.messages);
}

std::vector<tokenizer::ChatMessage> ShardDataset::Messages(int64_t index) const {
  const Sample& s = samples_[index];
  return s.messages.empty() ? Dataset::Messages(index) : s.messages;
}

absl::StatusOr<Example> ShardDataset::Get(int64_t index) const {
  return FirstImageExample(*this, index, "shards");
}

absl::StatusOr<std::pair<std::string, std::string>> ShardDataset::ImageBytes(int64_t index,
                                                                             int64_t image) const {
  RETURN_IF_ERROR(CheckImageIndex(*this, index, image, "shards"));
  const Sample& s = samples_[index];
  const TarMember& member = s.images[image];
  ASSIGN_OR_RETURN(std::string bytes, ReadTarMember(shards_[s.shard], member));
  return std::make_pair(std::move(bytes), absl::StrCat(shards_[s.shard], ": ", member.name));
}

absl::StatusOr<Image> ShardDataset::GetImage(int64_t index, int64_t image) const {
  ASSIGN_OR_RETURN(const auto read, ImageBytes(index, image));
  return LoadSampleImageBytes(read.first, read.second, image_size_, preprocessor_.get());
}

absl::StatusOr<std::vector<Image>> ShardDataset::GetTiles(int64_t index, int64_t image) const {
  if (preprocessor_ == nullptr || !preprocessor_->any_res()) return Dataset::GetTiles(index, image);
  ASSIGN_OR_RETURN(const auto read, ImageBytes(index, image));
  ASSIGN_OR_RETURN(const Image decoded,
                   DecodeImage(read.first, read.second, MaxPixelsFor(image_size_)));
  absl::StatusOr<std::vector<Image>> tiles = PreprocessTiles(*preprocessor_, decoded);
  if (!tiles.ok()) {
    return absl::Status(tiles.status().code(),
                        absl::StrCat(read.second, ": ", tiles.status().message()));
  }
  return tiles;
}

absl::StatusOr<Resolution> ShardDataset::ImageSize(int64_t index, int64_t image) const {
  {
    std::lock_guard<std::mutex> lock(sizes_mutex_);
    if (const auto it = sizes_.find({index, image}); it != sizes_.end()) return it->second;
  }
  ASSIGN_OR_RETURN(const auto read, ImageBytes(index, image));
  ASSIGN_OR_RETURN(const Resolution size, ImageSizeOf(read.first, read.second));
  std::lock_guard<std::mutex> lock(sizes_mutex_);
  sizes_.emplace(std::make_pair(index, image), size);
  return size;
}

}  // namespace tandem::data
