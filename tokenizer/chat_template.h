// Chat templates rendered without a Jinja engine: the two formats Tandem knows, picked by name or
// recognised in a tokenizer's chat_template text, rendered to exactly what transformers'
// apply_chat_template renders from those templates (tests/tokenizer/ compares them).
//
//   "chatml" (Qwen2): <|im_start|>{role}\n{content}<|im_end|>\n per message, after a default
//       system message when the first is not one; generation prompt <|im_start|>assistant\n.
//       The default system text is the template's own (Qwen2: "You are a helpful assistant.");
//       a template without one renders none.
//   "llama3" (Llama 3 Instruct): {bos}<|start_header_id|>{role}<|end_header_id|>\n\n{content,
//       whitespace trimmed}<|eot_id|> per message (bos before the first only); generation prompt
//       <|start_header_id|>assistant<|end_header_id|>\n\n.
//   "tandem" (Tandem's own models, exported by `tandem export`): {content}<bos> for a system or user
//       message, {content}<eos> for an assistant one; no generation prompt (a user turn's <bos>
//       starts the answer). A caption is the answer to a user turn holding only the image, so the
//       sequence reads <image rows> <bos> caption <eos>, as the models train from scratch.
// Llama 3.1's template (a "Cutting Knowledge Date" system header, tools) is a different format and
// is refused, as is any template that is neither. Stateless and thread-safe.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace tandem::tokenizer {

// The Jinja text of the "tandem" format, as `tandem export` writes it into tokenizer_config.json.
inline constexpr char kTandemChatTemplate[] =
    "{% for message in messages %}{% if message['role'] == 'assistant' %}{{ message['content'] }}<eos>"
    "{% else %}{{ message['content'] }}<bos>{% endif %}{% endfor %}";

struct ChatMessage {
  std::string role;  // "system", "user", "assistant"
  std::string content;
};

struct ChatFormat {
  std::string name;            // "chatml", "llama3" or "tandem"
  std::string default_system;  // chatml: the system message used when the first is not one
};

// InvalidArgument naming the format when it is not "chatml", "llama3" or "tandem".
absl::StatusOr<ChatFormat> ChatFormatByName(const std::string& name);
// Recognises a chat_template text; InvalidArgument saying what it found otherwise.
absl::StatusOr<ChatFormat> DetectChatFormat(const std::string& chat_template);

std::string RenderChat(const ChatFormat& format, const std::vector<ChatMessage>& messages,
                       const std::string& bos_token, bool add_generation_prompt);

// RenderChat's text in pieces, in order: each assistant message's content and its end-of-turn
// token ("<|im_end|>", "<|eot_id|>") are pieces with `trained` set, the loss's targets when a
// model learns to answer; everything else (system and user turns, role headers, the default
// system message, BOS) is not. The pieces joined equal RenderChat's text.
struct ChatPiece {
  std::string text;
  bool trained = false;
};
std::vector<ChatPiece> RenderChatPieces(const ChatFormat& format, const std::vector<ChatMessage>& messages,
                                        const std::string& bos_token, bool add_generation_prompt);

}  // namespace tandem::tokenizer
