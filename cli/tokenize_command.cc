#include "cli/tokenize_command.h"

#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "cli/generate_command.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/hf_tokenizer.h"

namespace tandem::cli {
namespace {

struct TokenizeRequest {
  std::string model_dir;
  std::string text;
  bool chat = false;
  std::string chat_template;
};

struct Tokenized {
  std::string text;
  std::vector<int64_t> ids;
  std::vector<std::string> tokens;
};

absl::StatusOr<Tokenized> Tokenize(const TokenizeRequest& request) {
  absl::StatusOr<tokenizer::HfTokenizer> tokenizer =
      tokenizer::HfTokenizer::Load(request.model_dir);
  if (!tokenizer.ok()) return tokenizer.status();
  Tokenized out;
  out.text = request.text;
  if (request.chat) {
    absl::StatusOr<tokenizer::ChatTemplate> chat =
        tokenizer::ChatTemplate::For(request.chat_template, *tokenizer);
    if (!chat.ok()) return chat.status();
    absl::StatusOr<std::string> rendered =
        chat->Render({{"user", request.text}}, /*add_generation_prompt=*/true);
    if (!rendered.ok()) return rendered.status();
    out.text = *std::move(rendered);
  }
  absl::StatusOr<std::vector<int64_t>> ids =
      tokenizer->Encode(out.text, /*add_special_tokens=*/!request.chat);
  if (!ids.ok()) return ids.status();
  out.ids = *std::move(ids);
  for (int64_t id : out.ids)
    out.tokens.push_back(tokenizer->Decode({id}, /*skip_special_tokens=*/false));
  return out;
}

}  // namespace

void AddTokenizeCommand(CLI::App& app, int* exit_code) {
  auto request = std::make_shared<TokenizeRequest>();
  auto output = std::make_shared<std::string>("text");
  CLI::App* tokenize = app.add_subcommand("tokenize",
                                          "What a model's tokenizer (and with --chat its chat "
                                          "template) makes of a text: ids and pieces");
  tokenize
      ->add_option(
          "--model", request->model_dir,
          "A directory with tokenizer.json (a Hugging Face model, a `tandem export` directory)")
      ->required();
  tokenize->add_option("text", request->text, "The text; <image> stays one token")->required();
  tokenize->add_flag(
      "--chat", request->chat,
      "Make the text one user turn of the model's chat template, with a generation prompt");
  AddChatTemplateOption(*tokenize, request->chat_template);
  tokenize
      ->add_option(
          "--output", *output,
          "text: the tokenized text, the ids and the pieces; json: {\"text\", \"ids\", \"tokens\"}")
      ->capture_default_str()
      ->check(CLI::IsMember({"text", "json"}));
  tokenize->callback([=] {
    const absl::StatusOr<Tokenized> result = Tokenize(*request);
    if (!result.ok()) {
      std::fprintf(stderr, "tandem tokenize: %s\n", std::string(result.status().message()).c_str());
      *exit_code = 1;
      return;
    }
    const auto replace =
        nlohmann::json::error_handler_t::replace;  // a lone byte of a split character
    if (*output == "json") {
      nlohmann::ordered_json j;
      j["text"] = result->text;
      j["ids"] = result->ids;
      j["tokens"] = result->tokens;
      std::printf("%s\n", j.dump(-1, ' ', false, replace).c_str());
    } else {
      std::string ids;
      for (int64_t id : result->ids) absl::StrAppend(&ids, ids.empty() ? "" : " ", id);
      const std::string text = nlohmann::json(result->text).dump(-1, ' ', false, replace);
      const std::string tokens = nlohmann::json(result->tokens).dump(-1, ' ', false, replace);
      std::printf("text:   %s\nids:    %s\ntokens: %s\n", text.c_str(), ids.c_str(),
                  tokens.c_str());
    }
    *exit_code = 0;
  });
}

}  // namespace tandem::cli
