// LLaVA's conversation data, and a conversation as the token ids and labels an LLM trains on.
//
// The file is LLaVA's format: a JSON list (or JSONL, one object a line) of
//   {"image": "path.png", "conversations": [{"from": "human", "value": "<image>\nWhat colour is
//   it?"},
//                                           {"from": "gpt", "value": "Red."}, ...]}
// "from" is "human", "gpt" or "system" (also "user" and "assistant"); "image" is optional and
// relative to the file. A conversation with an image has exactly one "<image>", in a human turn.
//
// EncodeConversation renders it with the model's chat template (tokenizer/chat_template.h) and
// tokenizes it piece by piece without adding special tokens again (the template writes them, as
// apply_chat_template tokenizes). Labels are the ids of the template's trained pieces (each
// assistant turn and its end of turn, or its {% generation %} blocks) and kIgnore everywhere else,
// so the loss is on the answers only; "<image>" becomes `image_tokens` copies of its id, never a
// target.
//
// Errors: ReadConversations names the file and the entry ("train.json: [3]: conversations[1].from
// \"bot\" is not human, gpt or system", "train.jsonl:12: ..."); EncodeConversation names a missing
// or repeated "<image>" and a tokenizer without the "<image>" token. Stateless and thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/hf_tokenizer.h"

namespace tandem::data {

struct Conversation {
  std::string image;  // resolved against the file's directory; "" for text only
  std::vector<tokenizer::ChatMessage> messages;  // roles "system", "user", "assistant"
  std::string source;  // "train.json: [3]" or "train.jsonl:12", for errors
};

absl::StatusOr<std::vector<Conversation>> ReadConversations(const std::string& path);

struct EncodedConversation {
  static constexpr int64_t kIgnore = -100;  // as PyTorch's cross_entropy ignore_index default
  std::vector<int64_t> ids;
  std::vector<int64_t> labels;  // the target of position t is labels[t + 1], as for ids
};

absl::StatusOr<EncodedConversation> EncodeConversation(const Conversation& conversation,
                                                       const tokenizer::HfTokenizer& tokenizer,
                                                       const tokenizer::ChatTemplate& chat,
                                                       int64_t image_tokens);
// EncodeConversation of bare messages, optionally with the template's generation prompt after them.
absl::StatusOr<EncodedConversation> EncodeMessages(
    const std::vector<tokenizer::ChatMessage>& messages, const std::string& source,
    const tokenizer::HfTokenizer& tokenizer, const tokenizer::ChatTemplate& chat,
    int64_t image_tokens, bool add_generation_prompt);

}  // namespace tandem::data
