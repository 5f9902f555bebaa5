#include "tokenizer/chat_template.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"

namespace tandem::tokenizer {
namespace {

constexpr char kImStart[] = "<|im_start|>";
constexpr char kImEnd[] = "<|im_end|>";

// Python's str.strip(), which Jinja's trim filter is.
std::string Trim(const std::string& s) {
  const char* space = " \t\n\r\f\v";
  const size_t begin = s.find_first_not_of(space);
  if (begin == std::string::npos) return "";
  return s.substr(begin, s.find_last_not_of(space) - begin + 1);
}

}  // namespace

absl::StatusOr<ChatFormat> ChatFormatByName(const std::string& name) {
  if (name == "tandem") return ChatFormat{"tandem", ""};
  if (name == "chatml") return ChatFormat{"chatml", "You are a helpful assistant."};
  if (name == "llama3") return ChatFormat{"llama3", ""};
  return absl::InvalidArgumentError(absl::StrCat("chat template \"", name, "\" is not known (chatml, llama3, tandem)"));
}

absl::StatusOr<ChatFormat> DetectChatFormat(const std::string& chat_template) {
  if (chat_template.empty()) return absl::InvalidArgumentError("the tokenizer has no chat template");
  if (chat_template == kTandemChatTemplate) return ChatFormat{"tandem", ""};
  if (absl::StrContains(chat_template, "Cutting Knowledge Date")) {
    return absl::InvalidArgumentError(
        "the chat template is Llama 3.1's (a dated system header, tools), which is not supported: name "
        "\"llama3\" to use Llama 3's");
  }
  if (absl::StrContains(chat_template, "<|start_header_id|>") && absl::StrContains(chat_template, "<|eot_id|>")) {
    return ChatFormat{"llama3", ""};
  }
  if (absl::StrContains(chat_template, kImStart) && absl::StrContains(chat_template, kImEnd)) {
    ChatFormat format{"chatml", ""};
    // The default system message as a literal: "...system\n<text><|im_end|>", the newline written
    // as is or escaped inside a Jinja string ("\\n", as Qwen2.5's template has it).
    for (const std::string& newline : {std::string("\n"), std::string("\\n")}) {
      const std::string open = absl::StrCat(kImStart, "system", newline);
      const size_t at = chat_template.find(open);
      if (at == std::string::npos) continue;
      const size_t begin = at + open.size();
      const size_t end = chat_template.find(kImEnd, begin);
      if (end == std::string::npos) continue;
      std::string text = chat_template.substr(begin, end - begin);
      if (text.find('\'') != std::string::npos || text.find("{{") != std::string::npos) continue;  // not a literal
      format.default_system = absl::StrReplaceAll(text, {{"\\n", "\n"}});
      break;
    }
    return format;
  }
  return absl::InvalidArgumentError("the chat template is neither ChatML nor Llama 3's: name one in the job spec");
}

std::vector<ChatPiece> RenderChatPieces(const ChatFormat& format, const std::vector<ChatMessage>& messages,
                                        const std::string& bos_token, bool add_generation_prompt) {
  std::vector<ChatPiece> out;
  const auto add = [&](std::string text, bool trained) {
    if (!text.empty()) out.push_back({std::move(text), trained});
  };
  if (format.name == "tandem") {
    for (const ChatMessage& message : messages) {
      const bool answer = message.role == "assistant";
      add(message.content, answer);
      add(answer ? "<eos>" : "<bos>", answer);
    }
    return out;
  }
  if (format.name == "llama3") {
    for (size_t i = 0; i < messages.size(); ++i) {
      const bool answer = messages[i].role == "assistant";
      if (i == 0) add(bos_token, false);
      add(absl::StrCat("<|start_header_id|>", messages[i].role, "<|end_header_id|>\n\n"), false);
      add(Trim(messages[i].content), answer);
      add("<|eot_id|>", answer);
    }
    if (add_generation_prompt) add("<|start_header_id|>assistant<|end_header_id|>\n\n", false);
    return out;
  }
  for (size_t i = 0; i < messages.size(); ++i) {
    const bool answer = messages[i].role == "assistant";
    if (i == 0 && messages[0].role != "system" && !format.default_system.empty()) {
      add(absl::StrCat(kImStart, "system\n", format.default_system, kImEnd, "\n"), false);
    }
    add(absl::StrCat(kImStart, messages[i].role, "\n"), false);
    add(messages[i].content, answer);
    add(kImEnd, answer);
    add("\n", false);
  }
  if (add_generation_prompt) add(absl::StrCat(kImStart, "assistant\n"), false);
  return out;
}

std::string RenderChat(const ChatFormat& format, const std::vector<ChatMessage>& messages,
                       const std::string& bos_token, bool add_generation_prompt) {
  std::string out;
  for (const ChatPiece& piece : RenderChatPieces(format, messages, bos_token, add_generation_prompt)) out += piece.text;
  return out;
}

}  // namespace tandem::tokenizer
