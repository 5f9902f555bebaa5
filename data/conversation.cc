#include "data/conversation.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "common/atomic_file.h"
#include "common/status_macros.h"
#include "common/strict_json.h"

namespace tandem::data {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr char kImage[] = "<image>";
constexpr char kVideo[] = "<video>";

int64_t CountOf(const std::string& text, std::string_view mark) {
  int64_t n = 0;
  for (size_t at = text.find(mark); at != std::string::npos; at = text.find(mark, at + 1)) ++n;
  return n;
}

std::string Plural(int64_t n, const std::string& one, const std::string& many) {
  return absl::StrCat(n, " ", n == 1 ? one : many);
}

class Parser {
 public:
  Parser(const json& j, std::string source, const fs::path& base, int64_t video_frames)
      : j_(j), base_(base), video_frames_(video_frames) {
    c_.source = std::move(source);
  }

  absl::StatusOr<Conversation> Parse() {
    if (!j_.is_object())
      return Error(absl::StrCat("must be an object, got ", DescribeJsonValue(j_)));
    if (j_.contains("messages")) {
      RETURN_IF_ERROR(Files("images", /*one_allowed=*/false));
      RETURN_IF_ERROR(Turns("messages", "role", "content"));
    } else {
      if (Present("image") && Present("video"))
        return Error("has both an image and a video; a sample holds one or the other");
      if (Present("video")) {
        RETURN_IF_ERROR(Files("video", /*one_allowed=*/false));
        RETURN_IF_ERROR(SampleFrames());
      } else {
        RETURN_IF_ERROR(Files("image", /*one_allowed=*/true));
      }
      RETURN_IF_ERROR(Turns("conversations", "from", "value"));
    }
    RETURN_IF_ERROR(CheckMarks());
    return std::move(c_);
  }

 private:
  absl::Status Error(const std::string& what) const {
    return absl::InvalidArgumentError(absl::StrCat(c_.source, ": ", what));
  }
  bool Present(const char* key) const { return j_.contains(key) && !j_[key].is_null(); }

  // `key`: a file name or (a non-empty list of) file names, resolved against the file's directory.
  absl::Status Files(const char* key, bool one_allowed) {
    if (!Present(key)) return absl::OkStatus();
    const json& value = j_[key];
    std::vector<const json*> names;
    if (value.is_string() && one_allowed) {
      names.push_back(&value);
    } else if (value.is_array() && !value.empty()) {
      for (const json& name : value) names.push_back(&name);
    } else {
      return Error(absl::StrCat(
          key, " must be ", one_allowed ? "a file name or " : "", "a non-empty list of file names",
          std::string_view(key) == "video" ? " (a video is its frames as image files)" : ""));
    }
    for (size_t i = 0; i < names.size(); ++i) {
      const std::string at = value.is_array() ? absl::StrCat(key, "[", i, "]") : key;
      if (!names[i]->is_string() || names[i]->get<std::string>().empty())
        return Error(absl::StrCat(at, " must be a file name"));
      const std::string name = names[i]->get<std::string>();
      // A file name ends at a NUL for the system: what follows it would be dropped unseen.
      if (name.find('\0') != std::string::npos)
        return Error(absl::StrCat(at, " contains a NUL character"));
      const fs::path path(name);
      c_.images.push_back((path.is_absolute() ? path : base_ / path).string());
    }
    return absl::OkStatus();
  }

  absl::Status SampleFrames() {
    c_.video = true;
    const int64_t frames = static_cast<int64_t>(c_.images.size());
    if (frames < video_frames_) {
      return Error(absl::StrCat("video has ", Plural(frames, "frame", "frames"),
                                ", fewer than data.video_frames = ", video_frames_));
    }
    std::vector<std::string> sampled;
    for (int64_t index : VideoFrameIndices(frames, video_frames_))
      sampled.push_back(c_.images[index]);
    c_.images = std::move(sampled);
    return absl::OkStatus();
  }

  absl::Status Turns(const char* key, const char* role_key, const char* content_key) {
    if (!j_.contains(key) || !j_[key].is_array() || j_[key].empty())
      return Error(absl::StrCat(key, " must be a non-empty list"));
    for (size_t i = 0; i < j_[key].size(); ++i) {
      const json& turn = j_[key][i];
      const std::string at = absl::StrCat(key, "[", i, "]");
      if (!turn.is_object() || !turn.contains(role_key) || !turn[role_key].is_string() ||
          !turn.contains(content_key) || !turn[content_key].is_string()) {
        return Error(absl::StrCat(at, " must be {\"", role_key, "\": ..., \"", content_key,
                                  "\": ...} with strings"));
      }
      const std::string from = turn[role_key].get<std::string>();
      std::string role;
      if (from == "human" || from == "user") {
        role = "user";
      } else if (from == "gpt" || from == "assistant") {
        role = "assistant";
      } else if (from == "system") {
        role = "system";
      } else {
        return Error(absl::StrCat(at, ".", role_key, " \"", from, "\" is not ",
                                  std::string_view(key) == "messages" ? "user, assistant or system"
                                                                      : "human, gpt or system"));
      }
      const std::string content = turn[content_key].get<std::string>();
      const int64_t marks = CountOf(content, kImage) + CountOf(content, kVideo);
      if (marks > 0 && role != "user")
        return Error(absl::StrCat(at, ": an image mark belongs in a human turn"));
      c_.messages.push_back({role, content});
    }
    return absl::OkStatus();
  }

  // One "<image>" an image, in order; a video's one mark becomes one "<image>" a frame.
  absl::Status CheckMarks() {
    int64_t images = 0, videos = 0;
    for (const auto& message : c_.messages) {
      images += CountOf(message.content, kImage);
      videos += CountOf(message.content, kVideo);
    }
    const int64_t files = static_cast<int64_t>(c_.images.size());
    if (c_.video) {
      if (images + videos != 1) {
        return Error(absl::StrCat("has a video and ", Plural(images + videos, "mark", "marks"),
                                  " (<video> or <image>), not 1"));
      }
      std::string frames;
      for (int64_t i = 0; i < files; ++i) frames += kImage;
      for (auto& message : c_.messages) {
        message.content =
            absl::StrReplaceAll(message.content, {{kVideo, frames}, {kImage, frames}});
      }
      return absl::OkStatus();
    }
    if (videos > 0) return Error("has a <video> mark but no video");
    if (images != files) {
      return Error(absl::StrCat("has ", Plural(files, "image", "images"), " and ",
                                Plural(images, "<image> mark", "<image> marks")));
    }
    return absl::OkStatus();
  }

  const json& j_;
  const fs::path& base_;
  const int64_t video_frames_;
  Conversation c_;
};

}  // namespace

std::vector<int64_t> VideoFrameIndices(int64_t frames, int64_t wanted) {
  std::vector<int64_t> indices;
  for (int64_t i = 0; i < wanted; ++i)
    indices.push_back(wanted == 1 ? 0 : i * (frames - 1) / (wanted - 1));
  return indices;
}

absl::StatusOr<Conversation> ParseConversation(std::string_view json_text,
                                               const std::string& source, const std::string& base,
                                               int64_t video_frames) {
  auto parsed = ParseJsonStrict(std::string(json_text));
  if (!parsed.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(source, ": ", parsed.status().message()));
  }
  return Parser(*parsed, source, fs::path(base), video_frames).Parse();
}

absl::StatusOr<Conversation> ParseConversationJson(const json& entry, const std::string& source,
                                                   const std::string& base, int64_t video_frames) {
  return Parser(entry, source, fs::path(base), video_frames).Parse();
}

absl::StatusOr<std::vector<Conversation>> ReadConversations(const std::string& path,
                                                            int64_t video_frames) {
  ASSIGN_OR_RETURN(const std::string text, ReadUserFile(path));
  const fs::path base = fs::path(path).parent_path();
  std::vector<Conversation> out;
  const size_t first = text.find_first_not_of(" \t\r\n");
  if (first != std::string::npos && text[first] == '[') {  // one JSON list
    auto parsed = ParseJsonStrict(text);
    if (!parsed.ok())
      return absl::InvalidArgumentError(absl::StrCat(path, ": ", parsed.status().message()));
    for (size_t i = 0; i < parsed->size(); ++i) {
      ASSIGN_OR_RETURN(
          auto c,
          Parser((*parsed)[i], absl::StrCat(path, ": [", i, "]"), base, video_frames).Parse());
      out.push_back(std::move(c));
    }
  } else {  // JSONL
    std::istringstream lines(text);
    std::string line;
    for (int number = 1; std::getline(lines, line); ++number) {
      if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
      auto parsed = ParseJsonStrict(line);
      if (!parsed.ok()) {
        return absl::InvalidArgumentError(
            absl::StrCat(path, ":", number, ": ", parsed.status().message()));
      }
      ASSIGN_OR_RETURN(
          auto c, Parser(*parsed, absl::StrCat(path, ":", number), base, video_frames).Parse());
      out.push_back(std::move(c));
    }
  }
  if (out.empty()) return absl::InvalidArgumentError(absl::StrCat(path, ": no conversations"));
  return out;
}

absl::StatusOr<EncodedConversation> EncodeConversation(const Conversation& conversation,
                                                       const tokenizer::HfTokenizer& tokenizer,
                                                       const tokenizer::ChatTemplate& chat,
                                                       int64_t image_tokens) {
  return EncodeMessages(conversation.messages, conversation.source, tokenizer, chat, image_tokens,
                        /*add_generation_prompt=*/false);
}

absl::StatusOr<EncodedConversation> EncodeMessages(
    const std::vector<tokenizer::ChatMessage>& messages, const std::string& source,
    const tokenizer::HfTokenizer& tokenizer, const tokenizer::ChatTemplate& chat,
    int64_t image_tokens, bool add_generation_prompt, const std::vector<int64_t>& image_positions) {
  const auto image_id = tokenizer.TokenToId(kImage);
  size_t marks = 0;
  if (!image_id) return absl::InvalidArgumentError("the tokenizer has no \"<image>\" token");
  EncodedConversation out;
  auto pieces = chat.RenderPieces(messages, add_generation_prompt);
  if (!pieces.ok())
    return absl::Status(pieces.status().code(),
                        absl::StrCat(source, ": ", pieces.status().message()));
  for (const auto& piece : *pieces) {
    auto ids = tokenizer.Encode(piece.text, /*add_special_tokens=*/false);
    if (!ids.ok())
      return absl::InvalidArgumentError(absl::StrCat(source, ": ", ids.status().message()));
    for (int64_t id : *ids) {
      int64_t copies = 1;
      if (id == *image_id && image_positions.empty()) {
        copies = image_tokens;
      } else if (id == *image_id) {
        if (marks == image_positions.size()) {
          return absl::InvalidArgumentError(
              absl::StrCat(source, ": has more \"<image>\" marks than its ", image_positions.size(),
                           image_positions.size() == 1 ? " image" : " images"));
        }
        copies = image_positions[marks++];
      }
      for (int64_t k = 0; k < copies; ++k) {
        out.ids.push_back(id);
        out.labels.push_back(piece.trained && id != *image_id ? id : EncodedConversation::kIgnore);
      }
    }
  }
  if (marks < image_positions.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        source, ": has ", marks, " \"<image>\" marks for ", image_positions.size(), " images"));
  }
  return out;
}

}  // namespace tandem::data
