#include "data/conversation.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/atomic_file.h"
#include "common/status_macros.h"
#include "common/strict_json.h"

namespace tandem::data {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr char kImage[] = "<image>";

absl::StatusOr<Conversation> ParseOne(const json& j, const std::string& source,
                                      const fs::path& base) {
  const auto error = [&](const std::string& what) {
    return absl::InvalidArgumentError(absl::StrCat(source, ": ", what));
  };
  if (!j.is_object()) return error(absl::StrCat("must be an object, got ", DescribeJsonValue(j)));
  Conversation c;
  c.source = source;
  if (j.contains("image") && !j["image"].is_null()) {
    if (!j["image"].is_string() || j["image"].get<std::string>().empty())
      return error("image must be a file name");
    // A file name ends at a NUL for the system: what follows it would be dropped unseen.
    if (j["image"].get<std::string>().find('\0') != std::string::npos)
      return error("image contains a NUL character");
    const fs::path image(j["image"].get<std::string>());
    c.image = (image.is_absolute() ? image : base / image).string();
  }
  if (!j.contains("conversations") || !j["conversations"].is_array() ||
      j["conversations"].empty()) {
    return error("conversations must be a non-empty list");
  }
  int images = 0;
  for (size_t i = 0; i < j["conversations"].size(); ++i) {
    const json& turn = j["conversations"][i];
    const std::string at = absl::StrCat("conversations[", i, "]");
    if (!turn.is_object() || !turn.contains("from") || !turn["from"].is_string() ||
        !turn.contains("value") || !turn["value"].is_string()) {
      return error(absl::StrCat(at, " must be {\"from\": ..., \"value\": ...} with strings"));
    }
    const std::string from = turn["from"].get<std::string>();
    std::string role;
    if (from == "human" || from == "user") {
      role = "user";
    } else if (from == "gpt" || from == "assistant") {
      role = "assistant";
    } else if (from == "system") {
      role = "system";
    } else {
      return error(absl::StrCat(at, ".from \"", from, "\" is not human, gpt or system"));
    }
    const std::string value = turn["value"].get<std::string>();
    const int here = static_cast<int>(absl::StrContains(value, kImage) ? 1 : 0);
    if (here && (role != "user" || value.find(kImage) != value.rfind(kImage))) {
      return error(absl::StrCat(at, ": <image> belongs once in a human turn"));
    }
    images += here;
    c.messages.push_back({role, value});
  }
  if (!c.image.empty() && images != 1)
    return error(absl::StrCat("has an image and ", images, " <image> marks, not 1"));
  if (c.image.empty() && images != 0) return error("has an <image> mark but no image");
  return c;
}

}  // namespace

absl::StatusOr<std::vector<Conversation>> ReadConversations(const std::string& path) {
  ASSIGN_OR_RETURN(const std::string text, ReadUserFile(path));
  const fs::path base = fs::path(path).parent_path();
  std::vector<Conversation> out;
  const size_t first = text.find_first_not_of(" \t\r\n");
  if (first != std::string::npos && text[first] == '[') {  // one JSON list
    auto parsed = ParseJsonStrict(text);
    if (!parsed.ok())
      return absl::InvalidArgumentError(absl::StrCat(path, ": ", parsed.status().message()));
    for (size_t i = 0; i < parsed->size(); ++i) {
      ASSIGN_OR_RETURN(auto c, ParseOne((*parsed)[i], absl::StrCat(path, ": [", i, "]"), base));
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
      ASSIGN_OR_RETURN(auto c, ParseOne(*parsed, absl::StrCat(path, ":", number), base));
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
    int64_t image_tokens, bool add_generation_prompt) {
  const auto image_id = tokenizer.TokenToId(kImage);
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
      const int64_t copies = id == *image_id ? image_tokens : 1;
      for (int64_t k = 0; k < copies; ++k) {
        out.ids.push_back(id);
        out.labels.push_back(piece.trained && id != *image_id ? id : EncodedConversation::kIgnore);
      }
    }
  }
  return out;
}

}  // namespace tandem::data
