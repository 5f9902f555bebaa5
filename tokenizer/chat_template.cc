#include "tokenizer/chat_template.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

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
  if (name == "chatml") return ChatFormat{"chatml", "You are a helpful assistant."};
  if (name == "llama3") return ChatFormat{"llama3", ""};
  return absl::InvalidArgumentError(absl::StrCat("chat template \"", name, "\" is not known (chatml, llama3)"));
}

absl::StatusOr<ChatFormat> DetectChatFormat(const std::string& chat_template) {
  if (chat_template.empty()) return absl::InvalidArgumentError("the tokenizer has no chat template");
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
    const std::string open = absl::StrCat(kImStart, "system\n");
    const size_t at = chat_template.find(open);
    if (at != std::string::npos) {
      const size_t begin = at + open.size();
      const size_t end = chat_template.find(kImEnd, begin);
      // A literal default ("...system\nYou are ...<|im_end|>"), not the message's own content.
      if (end != std::string::npos && chat_template.substr(begin, end - begin).find('\'') == std::string::npos) {
        format.default_system = chat_template.substr(begin, end - begin);
      }
    }
    return format;
  }
  return absl::InvalidArgumentError("the chat template is neither ChatML nor Llama 3's: name one in the job spec");
}

std::string RenderChat(const ChatFormat& format, const std::vector<ChatMessage>& messages,
                       const std::string& bos_token, bool add_generation_prompt) {
  std::string out;
  if (format.name == "llama3") {
    for (size_t i = 0; i < messages.size(); ++i) {
      if (i == 0) out += bos_token;
      absl::StrAppend(&out, "<|start_header_id|>", messages[i].role, "<|end_header_id|>\n\n",
                      Trim(messages[i].content), "<|eot_id|>");
    }
    if (add_generation_prompt) out += "<|start_header_id|>assistant<|end_header_id|>\n\n";
    return out;
  }
  for (size_t i = 0; i < messages.size(); ++i) {
    if (i == 0 && messages[0].role != "system" && !format.default_system.empty()) {
      absl::StrAppend(&out, kImStart, "system\n", format.default_system, kImEnd, "\n");
    }
    absl::StrAppend(&out, kImStart, messages[i].role, "\n", messages[i].content, kImEnd, "\n");
  }
  if (add_generation_prompt) absl::StrAppend(&out, kImStart, "assistant\n");
  return out;
}

}  // namespace tandem::tokenizer
