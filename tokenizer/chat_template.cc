#include "tokenizer/chat_template.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "tokenizer/hf_tokenizer.h"

namespace tandem::tokenizer {
namespace {

constexpr char kImage[] = "<image>";

constexpr char kChatml[] =
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\\nYou are a helpful assistant.<|im_end|>\\n' }}{% endif %}"
    "{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n'}}{% "
    "endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";

constexpr char kLlama3[] =
    "{% set loop_messages = messages %}{% for message in loop_messages %}"
    "{% set content = '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n'+ "
    "message['content'] | trim "
    "+ '<|eot_id|>' %}{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% endif "
    "%}{{ content }}"
    "{% endfor %}{% if add_generation_prompt %}{{ "
    "'<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{% endif %}";

// A message's content as a processor template reads it: image and text parts.
jinja::Value StructuredContent(const std::string& content) {
  jinja::List parts;
  size_t begin = 0;
  while (true) {
    const size_t at = content.find(kImage, begin);
    const std::string text =
        content.substr(begin, at == std::string::npos ? std::string::npos : at - begin);
    if (!text.empty()) {
      jinja::Dict part;
      part.Set("type", jinja::Value::String("text"));
      part.Set("text", jinja::Value::String(text));
      parts.push_back(jinja::Value::MakeDict(std::move(part)));
    }
    if (at == std::string::npos) break;
    jinja::Dict image;
    image.Set("type", jinja::Value::String("image"));
    parts.push_back(jinja::Value::MakeDict(std::move(image)));
    begin = at + sizeof(kImage) - 1;
  }
  return jinja::Value::MakeList(std::move(parts));
}

}  // namespace

SpecialTokens SpecialTokensOf(const HfTokenizer& tokenizer) {
  return SpecialTokens{tokenizer.bos_token(), tokenizer.eos_token(), tokenizer.pad_token(),
                       tokenizer.unk_token()};
}

absl::StatusOr<ChatTemplate> ChatTemplate::Compile(const std::string& name,
                                                   const std::string& source, SpecialTokens tokens,
                                                   bool structured_content) {
  auto parsed = jinja::Template::Parse(source);
  if (!parsed.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(name, ": ", parsed.status().message()));
  }
  ChatTemplate t;
  t.name_ = name;
  t.template_ = std::make_shared<const jinja::Template>(*std::move(parsed));
  t.tokens_ = std::move(tokens);
  t.structured_ = structured_content;
  // The end of a turn: what follows an answer, read from a probe conversation.
  const std::string answer = "Tandem probes the end of a turn";
  // Some templates insist on a system message first; a template that renders neither probe leaves
  // end_of_turn empty, and generation then stops at EOS alone.
  auto probe = t.RenderRaw({{"user", "Hi"}, {"assistant", answer}}, false);
  if (!probe.ok())
    probe = t.RenderRaw({{"system", "Be brief."}, {"user", "Hi"}, {"assistant", answer}}, false);
  if (probe.ok()) {
    t.has_generation_blocks_ = !probe->generation.empty();
    const size_t at = probe->text.rfind(answer);
    if (at != std::string::npos) {
      std::string after = probe->text.substr(at + answer.size());
      const size_t begin = after.find_first_not_of(" \t\n");
      if (begin != std::string::npos) {
        after = after.substr(begin);
        t.end_of_turn_ = after.substr(0, after.find_first_of(" \t\n"));
      }
    }
  }
  return t;
}

absl::StatusOr<ChatTemplate> ChatTemplate::Named(const std::string& name, SpecialTokens tokens) {
  if (name == "tandem") return Compile(name, kTandemChatTemplate, std::move(tokens), false);
  if (name == "chatml") return Compile(name, kChatml, std::move(tokens), false);
  if (name == "llama3") return Compile(name, kLlama3, std::move(tokens), false);
  return absl::InvalidArgumentError(
      absl::StrCat("chat template \"", name, "\" is not known (chatml, llama3, tandem)"));
}

absl::StatusOr<ChatTemplate> ChatTemplate::OfTokenizer(const HfTokenizer& tokenizer) {
  if (tokenizer.chat_template().empty()) {
    return absl::InvalidArgumentError(
        "the tokenizer has no chat template (chat_template.jinja, chat_template.json, "
        "processor_config.json or "
        "tokenizer_config.json): name one in the job spec");
  }
  return Compile(tokenizer.chat_template_file(), tokenizer.chat_template(),
                 SpecialTokensOf(tokenizer), tokenizer.chat_template_structured());
}

absl::StatusOr<ChatTemplate> ChatTemplate::For(const std::string& name,
                                               const HfTokenizer& tokenizer) {
  return name.empty() ? OfTokenizer(tokenizer) : Named(name, SpecialTokensOf(tokenizer));
}

absl::StatusOr<jinja::Rendered> ChatTemplate::RenderRaw(const std::vector<ChatMessage>& messages,
                                                        bool add_generation_prompt) const {
  jinja::List list;
  for (const ChatMessage& m : messages) {
    jinja::Dict message;
    message.Set("role", jinja::Value::String(m.role));
    message.Set("content",
                structured_ ? StructuredContent(m.content) : jinja::Value::String(m.content));
    list.push_back(jinja::Value::MakeDict(std::move(message)));
  }
  jinja::Dict variables;
  variables.Set("messages", jinja::Value::MakeList(std::move(list)));
  variables.Set("tools", jinja::Value::None());
  variables.Set("documents", jinja::Value::None());
  variables.Set("add_generation_prompt", jinja::Value::Bool(add_generation_prompt));
  const std::pair<const char*, const std::string*> special[] = {{"bos_token", &tokens_.bos},
                                                                {"eos_token", &tokens_.eos},
                                                                {"pad_token", &tokens_.pad},
                                                                {"unk_token", &tokens_.unk}};
  for (const auto& [key, value] : special) {
    if (!value->empty()) variables.Set(key, jinja::Value::String(*value));
  }
  absl::StatusOr<jinja::Rendered> rendered = template_->Render(variables);
  if (!rendered.ok()) {
    return absl::Status(rendered.status().code(),
                        absl::StrCat(name_, ": ", rendered.status().message()));
  }
  return rendered;
}

absl::StatusOr<std::string> ChatTemplate::Render(const std::vector<ChatMessage>& messages,
                                                 bool add_generation_prompt) const {
  ASSIGN_OR_RETURN(jinja::Rendered r, RenderRaw(messages, add_generation_prompt));
  return std::move(r.text);
}

absl::StatusOr<std::vector<ChatPiece>> ChatTemplate::RenderPieces(
    const std::vector<ChatMessage>& messages, bool add_generation_prompt) const {
  ASSIGN_OR_RETURN(jinja::Rendered whole, RenderRaw(messages, add_generation_prompt));
  std::vector<std::pair<size_t, size_t>> trained;
  if (has_generation_blocks_) {
    trained = whole.generation;
  } else {
    for (size_t i = 0; i < messages.size(); ++i) {
      if (messages[i].role != "assistant") continue;
      const std::vector<ChatMessage> before(messages.begin(),
                                            messages.begin() + static_cast<std::ptrdiff_t>(i));
      const std::vector<ChatMessage> through(messages.begin(),
                                             messages.begin() + static_cast<std::ptrdiff_t>(i) + 1);
      ASSIGN_OR_RETURN(jinja::Rendered prompt, RenderRaw(before, /*add_generation_prompt=*/true));
      ASSIGN_OR_RETURN(jinja::Rendered answered,
                       RenderRaw(through, /*add_generation_prompt=*/false));
      if (!absl::StartsWith(answered.text, prompt.text) ||
          !absl::StartsWith(whole.text, answered.text)) {
        return absl::InvalidArgumentError(absl::StrCat(
            name_, ": the template does not render the conversation before message ", i,
            " as the start of the conversation through it, so the assistant's text cannot be told "
            "apart; give the "
            "template {% generation %} blocks or name a chat template in the job spec"));
      }
      size_t end = answered.text.size();
      if (!end_of_turn_.empty()) {
        const size_t at = answered.text.find(end_of_turn_, prompt.text.size());
        if (at != std::string::npos) end = at + end_of_turn_.size();
      }
      trained.emplace_back(prompt.text.size(), end);
    }
  }
  std::vector<ChatPiece> pieces;
  size_t at = 0;
  for (const auto& [begin, end] : trained) {
    if (begin > at) pieces.push_back({whole.text.substr(at, begin - at), false});
    if (end > begin) pieces.push_back({whole.text.substr(begin, end - begin), true});
    at = std::max(at, end);
  }
  if (at < whole.text.size()) pieces.push_back({whole.text.substr(at), false});
  return pieces;
}

}  // namespace tandem::tokenizer
