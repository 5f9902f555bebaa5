// `tandem tokenize` as a user runs it, against transformers: the ids of a plain text equal the
// tokenizers library's, and with --chat the ids equal the prompt `tandem generate` feeds (which
// tests/hf/ compares with transformers' apply_chat_template and tokenizer), "<image>" unexpanded.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "tests/service/service_testing.h"
#include "tests/testing/json_file.h"

namespace tandem {
namespace {

using ::testing::HasSubstr;

const std::string kFixtures = TANDEM_HF_FIXTURES;

// Single-quoted for the shell.
std::string Quoted(const std::string& text) { return "'" + text + "'"; }

TEST(TokenizeCommand, PrintsTheIdsTheTokenizersLibraryGives) {
  const nlohmann::json reference = testing::ReadJsonFile(kFixtures + "/reference/tokenizers.json");
  const std::string text = reference["corpus"][0];
  const testing::Outcome run = testing::Tandem(
      absl::StrCat("tokenize --model ", kFixtures, "/siglip_qwen2 --output json ", Quoted(text)));
  ASSERT_EQ(run.exit_code, 0) << run.output;
  const nlohmann::json out = nlohmann::json::parse(run.output);
  EXPECT_EQ(out["text"], text);
  EXPECT_EQ(out["ids"], reference["tokenizers"]["siglip_qwen2"]["encodings"][0]);
  ASSERT_EQ(out["tokens"].size(), out["ids"].size());
  std::string joined;
  for (const auto& token : out["tokens"]) joined += token.get<std::string>();
  EXPECT_EQ(joined, text);
}

TEST(TokenizeCommand, WithChatTokenizesTheTemplatesRender) {
  const nlohmann::json generate = testing::ReadJsonFile(kFixtures + "/reference/generate.json");
  const nlohmann::json& chat_run = generate["siglip_qwen2"][1];
  ASSERT_TRUE(chat_run["chat"].get<bool>());
  const testing::Outcome run = testing::Tandem(absl::StrCat("tokenize --model ", kFixtures,
                                                            "/siglip_qwen2 --chat --output json ",
                                                            Quoted(chat_run["prompt"])));
  ASSERT_EQ(run.exit_code, 0) << run.output;
  const nlohmann::json out = nlohmann::json::parse(run.output);
  EXPECT_THAT(out["text"].get<std::string>(), HasSubstr("<|im_start|>assistant\n"));
  // generate's prompt with each run of image tokens (397) folded back into one.
  std::vector<int64_t> folded;
  for (int64_t id : chat_run["prompt_token_ids"].get<std::vector<int64_t>>()) {
    if (id == 397 && !folded.empty() && folded.back() == 397) continue;
    folded.push_back(id);
  }
  EXPECT_EQ(out["ids"].get<std::vector<int64_t>>(), folded);
}

TEST(TokenizeCommand, TextOutputAndErrors) {
  const testing::Outcome text = testing::Tandem(
      absl::StrCat("tokenize --model ", kFixtures, "/siglip_qwen2 'What colour is the shape?'"));
  ASSERT_EQ(text.exit_code, 0) << text.output;
  EXPECT_THAT(text.output, HasSubstr("text:   \"What colour is the shape?\"\nids:    "));
  const testing::Outcome missing = testing::Tandem("tokenize --model /nonexistent/model 'hi'");
  EXPECT_EQ(missing.exit_code, 1);
  EXPECT_THAT(missing.output, HasSubstr("tandem tokenize: "));
  EXPECT_THAT(missing.output, HasSubstr("/nonexistent/model"));
  const testing::Outcome help = testing::Tandem("tokenize --help");
  for (const char* flag : {"--model", "--chat", "--chat-template", "--output"}) {
    EXPECT_THAT(help.output, HasSubstr(flag));
  }
}

}  // namespace
}  // namespace tandem
