// A model's chat template, run: the Jinja text of the tokenizer (or processor) rendered by
// Tandem's interpreter (tokenizer/jinja/template.h) with the variables transformers'
// apply_chat_template passes (messages, add_generation_prompt, tools and documents as None, the
// special tokens bos_token, eos_token, pad_token and unk_token where the tokenizer has them), so
// the text is what apply_chat_template renders (tests/tokenizer/ compares them byte for byte).
//
// Built-in templates by name, for a job spec that names one (llm.chat_template):
//   "chatml"  Qwen2's: a default system message "You are a helpful assistant." when the first
//             message is not a system one, <|im_start|>{role}\n{content}<|im_end|>\n per message.
//   "llama3"  Llama 3 Instruct's: {bos}<|start_header_id|>{role}<|end_header_id|>\n\n{content,
//             trimmed}<|eot_id|> per message.
//   "tandem"  Tandem's own models' (kTandemChatTemplate, which `tandem export` writes).
//
// Which text is trained (RenderPieces): the template's {% generation %} blocks where it has them
// (Hugging Face's assistant mask); otherwise each assistant message's span, found by rendering the
// conversation up to it with the generation prompt and through it: what the longer render adds,
// up to and including the end-of-turn text. A template that does not render a conversation as a
// prefix of its continuation (one that rewrites earlier turns, as Qwen3's drops old reasoning) is
// refused there, naming the message, since no mask can be read from it.
//
// Content: a message's content is passed as a string, or, for a processor's template
// (structured_content: chat_template.json, processor_config.json), as a list of parts, {"type":
// "image"} for each "<image>" and {"type": "text", "text": ...} for the text between.
//
// Errors: InvalidArgument for a template that does not parse ("chat_template.jinja: line 3: ...")
// or fails while rendering; FailedPrecondition for one that raises (raise_exception), with its
// message. Immutable after construction and thread-safe.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "tokenizer/jinja/template.h"

namespace tandem::tokenizer {

class HfTokenizer;

// The Jinja text of the "tandem" template, as `tandem export` writes it into tokenizer_config.json.
inline constexpr char kTandemChatTemplate[] =
    "{% for message in messages %}{% if message['role'] == 'assistant' %}{{ message['content'] "
    "}}<eos>"
    "{% else %}{{ message['content'] }}<bos>{% endif %}{% endfor %}";

struct ChatMessage {
  std::string role;  // "system", "user", "assistant"
  std::string content;
};

// A piece of a rendered conversation; `trained` pieces are the loss's targets.
struct ChatPiece {
  std::string text;
  bool trained = false;
};

struct SpecialTokens {
  std::string bos, eos, pad, unk;  // "" where the tokenizer has none
};

class ChatTemplate {
 public:
  // `name` appears in errors (a file name, a built-in's name).
  static absl::StatusOr<ChatTemplate> Compile(const std::string& name, const std::string& source,
                                              SpecialTokens tokens, bool structured_content);
  // "chatml", "llama3" or "tandem"; InvalidArgument naming the name otherwise.
  static absl::StatusOr<ChatTemplate> Named(const std::string& name, SpecialTokens tokens);
  // The tokenizer's own template (HfTokenizer::chat_template()); InvalidArgument when it has none.
  static absl::StatusOr<ChatTemplate> OfTokenizer(const HfTokenizer& tokenizer);
  // Named(name) when `name` is not empty, else OfTokenizer.
  static absl::StatusOr<ChatTemplate> For(const std::string& name, const HfTokenizer& tokenizer);

  absl::StatusOr<std::string> Render(const std::vector<ChatMessage>& messages,
                                     bool add_generation_prompt) const;
  // Render's text in pieces, in order; joined they equal Render's text.
  absl::StatusOr<std::vector<ChatPiece>> RenderPieces(const std::vector<ChatMessage>& messages,
                                                      bool add_generation_prompt) const;

  const std::string& name() const { return name_; }
  // What the template writes right after an assistant message's content, up to whitespace
  // ("<|im_end|>", "<|eot_id|>", "<eos>"); "" when nothing (generation then stops at EOS only).
  const std::string& end_of_turn() const { return end_of_turn_; }

 private:
  absl::StatusOr<jinja::Rendered> RenderRaw(const std::vector<ChatMessage>& messages,
                                            bool add_generation_prompt) const;

  std::string name_;
  std::shared_ptr<const jinja::Template> template_;
  SpecialTokens tokens_;
  bool structured_ = false;
  bool has_generation_blocks_ = false;
  std::string end_of_turn_;
};

SpecialTokens SpecialTokensOf(const HfTokenizer& tokenizer);

}  // namespace tandem::tokenizer
