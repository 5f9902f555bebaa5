// tandem-chat-template-bench: what rendering a conversation costs the data loader. A chat
// template (a file, or a built-in by name) renders a conversation of --answers question-answer
// pairs: once as text (Render, the baseline) and once in trained pieces (RenderPieces, what each
// training sample costs: the generation blocks, or two renders per answer without them). Prints
// microseconds per conversation for both, their ratio and conversations per second per core.
//
//   tandem-chat-template-bench --template tests/fixtures/chat_templates/qwen2_5.jinja --answers 10
#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "tokenizer/chat_template.h"

namespace {

using Clock = std::chrono::steady_clock;

template <typename F>
double MicrosecondsPerCall(int repeats, F&& call) {
  const auto start = Clock::now();
  for (int i = 0; i < repeats; ++i) call();
  return std::chrono::duration<double, std::micro>(Clock::now() - start).count() / repeats;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Chat-template render cost per conversation: Render against RenderPieces"};
  std::string template_path;
  std::string builtin = "chatml";
  int answers = 10;
  int repeats = 200;
  bool structured = false;
  app.add_option("--template", template_path,
                 "A Jinja chat template file (default: the built-in --builtin)");
  app.add_option("--builtin", builtin, "chatml, llama3 or tandem, when no --template")
      ->capture_default_str();
  app.add_option("--answers", answers, "Question-answer pairs in the conversation")
      ->capture_default_str();
  app.add_option("--repeats", repeats, "Renders timed per measurement")->capture_default_str();
  app.add_flag("--structured", structured,
               "Pass content as image and text parts (a processor's template)");
  CLI11_PARSE(app, argc, argv);

  const tandem::tokenizer::SpecialTokens tokens{"<s>", "</s>", "", ""};
  absl::StatusOr<tandem::tokenizer::ChatTemplate> chat;
  if (template_path.empty()) {
    chat = tandem::tokenizer::ChatTemplate::Named(builtin, tokens);
  } else {
    std::ifstream in(template_path, std::ios::binary);
    std::stringstream text;
    text << in.rdbuf();
    chat = tandem::tokenizer::ChatTemplate::Compile(template_path, text.str(), tokens, structured);
  }
  if (!chat.ok()) {
    std::fprintf(stderr, "%s\n", std::string(chat.status().message()).c_str());
    return 1;
  }
  std::vector<tandem::tokenizer::ChatMessage> messages{{"system", "You describe images briefly."}};
  for (int i = 0; i < answers; ++i) {
    messages.push_back(
        {"user", i == 0 ? "<image>\nWhat colour is the shape in the picture?" : "And its size?"});
    messages.push_back({"assistant", "It is a small red circle at the top left of the picture."});
  }
  const auto check = chat->RenderPieces(messages, false);
  if (!check.ok()) {
    std::fprintf(stderr, "%s\n", std::string(check.status().message()).c_str());
    return 1;
  }
  for (int i = 0; i < repeats / 10 + 1; ++i)
    (void)chat->RenderPieces(messages, false);  // warm caches
  const double render = MicrosecondsPerCall(repeats, [&] { (void)chat->Render(messages, false); });
  const double pieces =
      MicrosecondsPerCall(repeats, [&] { (void)chat->RenderPieces(messages, false); });
  std::printf("template %s, %d answers (%zu messages)\n", chat->name().c_str(), answers,
              messages.size());
  std::printf("Render        %10.1f us\nRenderPieces  %10.1f us  (%.1fx Render)\n", render, pieces,
              pieces / render);
  std::printf("conversations/s per core with their labels: %.0f\n", 1e6 / pieces);
  return 0;
}
