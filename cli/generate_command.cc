#include "cli/generate_command.h"

#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "hf/generate.h"

namespace tandem::cli {

void AddChatTemplateOption(CLI::App& command, std::string& chat_template) {
  command
      .add_option("--chat-template", chat_template,
                  "With --chat: a built-in template, chatml, llama3 or tandem (default: the "
                  "model's own, run)")
      ->check(CLI::IsMember({"chatml", "llama3", "tandem"}));
}

void AddGenerateCommand(CLI::App& app, int* exit_code) {
  auto request = std::make_shared<hf::GenerateRequest>();
  auto output = std::make_shared<std::string>("text");
  CLI::App* generate = app.add_subcommand(
      "generate",
      "Greedy generation from a Hugging Face LLaVA directory: images and a prompt in, text out");
  generate
      ->add_option("--model", request->model_dir,
                   "A Hugging Face LLaVA directory (config.json, *.safetensors, tokenizer.json, "
                   "preprocessor_config.json or transformers 5's processor_config.json), a "
                   "finished Tandem run "
                   "directory or one of its checkpoints")
      ->required();
  generate->add_option("--image", request->images,
                       "PNG or JPEG image; repeat for several, in the order of the prompt's "
                       "<image> marks; none for a text-only prompt");
  generate
      ->add_option("--prompt", request->prompt,
                   "Raw prompt text; each <image> marks where an image goes (tokenized with the "
                   "model's tokenizer and its special tokens)")
      ->required();
  generate->add_option("--max-new-tokens", request->max_new_tokens, "Tokens to generate at most")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  generate->add_flag(
      "--chat", request->chat,
      "Wrap the prompt as one user turn of the model's chat template, with a generation prompt");
  AddChatTemplateOption(*generate, request->chat_template);
  generate
      ->add_option(
          "--output", *output,
          "text: the generated text; json: {\"text\", \"token_ids\", \"prompt_tokens\", "
          "\"prompt_token_ids\" (image tokens expanded), \"prompt_text\" (what was tokenized)}")
      ->capture_default_str()
      ->check(CLI::IsMember({"text", "json"}));
  generate->add_option("--threads", request->threads, "Intra-op threads (default: LibTorch's)")
      ->check(CLI::NonNegativeNumber);
  generate->callback([=] {
    const auto result = hf::Generate(*request);
    if (!result.ok()) {
      std::fprintf(stderr, "tandem generate: %s\n", std::string(result.status().message()).c_str());
      *exit_code = 1;
      return;
    }
    if (*output == "json") {
      nlohmann::ordered_json j;
      j["text"] = result->text;
      j["token_ids"] = result->token_ids;
      j["prompt_tokens"] = result->prompt_tokens;
      j["prompt_token_ids"] = result->prompt_token_ids;
      j["prompt_text"] = result->prompt_text;
      std::printf("%s\n", j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
    } else {
      std::printf("%s\n", result->text.c_str());
    }
    *exit_code = 0;
  });
}

}  // namespace tandem::cli
