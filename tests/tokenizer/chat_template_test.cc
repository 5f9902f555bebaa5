#include "tokenizer/chat_template.h"

#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "nlohmann/json.hpp"
#include "tests/testing/json_file.h"
#include "tokenizer/hf_tokenizer.h"

namespace tandem::tokenizer {
namespace {

const std::string kFixtures = TANDEM_HF_FIXTURES;

// The rendered conversations of tests/fixtures/hf/reference/tokenizers.json: apply_chat_template's
// output for Llama 3's template (clip_llama) and Qwen2's ChatML (siglip_qwen2), with and without a
// system message and a generation prompt.
class ChatTemplateReference : public ::testing::TestWithParam<std::string> {};

TEST_P(ChatTemplateReference, RendersWhatApplyChatTemplateRenders) {
  const auto reference = testing::ReadJsonFile(kFixtures + "/reference/tokenizers.json")["tokenizers"][GetParam()]["chat"];
  auto tokenizer = HfTokenizer::Load(kFixtures + "/" + GetParam());
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
  auto format = DetectChatFormat(tokenizer->chat_template());
  ASSERT_TRUE(format.ok()) << format.status();
  ASSERT_EQ(reference.size(), 6u);
  for (const auto& entry : reference) {
    std::vector<ChatMessage> messages;
    for (const auto& m : entry["messages"]) messages.push_back({m["role"], m["content"]});
    EXPECT_EQ(RenderChat(*format, messages, tokenizer->bos_token(), entry["add_generation_prompt"].get<bool>()),
              entry["rendered"].get<std::string>());
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, ChatTemplateReference, ::testing::Values("clip_llama", "siglip_qwen2"));

TEST(ChatTemplate, DetectsTheFormatAndItsDefaultSystemMessage) {
  auto chatml = DetectChatFormat("{{ '<|im_start|>system\nBe brief.<|im_end|>\n' }}{{'<|im_start|>' + m }}");
  ASSERT_TRUE(chatml.ok());
  EXPECT_EQ(chatml->name, "chatml");
  EXPECT_EQ(chatml->default_system, "Be brief.");
  EXPECT_EQ(RenderChat(*chatml, {{"user", "hi"}}, "", true),
            "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n");
  auto plain = DetectChatFormat("{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>'}}");
  ASSERT_TRUE(plain.ok());
  EXPECT_EQ(RenderChat(*plain, {{"user", "hi"}}, "", false), "<|im_start|>user\nhi<|im_end|>\n");
}

TEST(ChatTemplate, ReadsADefaultSystemMessageWrittenWithAnEscapedNewline) {
  // Qwen2.5 writes it inside a Jinja string: '<|im_start|>system\nYou are Qwen...<|im_end|>\n'.
  auto qwen25 = DetectChatFormat(R"({{- '<|im_start|>system\nYou are Qwen.\nBe kind.<|im_end|>\n' }})"
                                 R"({{- '<|im_start|>' + message.role + '\n' + message.content + '<|im_end|>' }})");
  ASSERT_TRUE(qwen25.ok());
  EXPECT_EQ(qwen25->default_system, "You are Qwen.\nBe kind.");
}

TEST(ChatTemplate, RefusesWhatItCannotRender) {
  EXPECT_NE(DetectChatFormat("Cutting Knowledge Date: December 2023 <|start_header_id|><|eot_id|>")
                .status().message().find("Llama 3.1"), std::string::npos);
  EXPECT_EQ(DetectChatFormat("{{ messages }}").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(DetectChatFormat("").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(ChatFormatByName("vicuna").status().message().find("\"vicuna\" is not known (chatml, llama3, tandem)"),
            std::string::npos);
}

}  // namespace
}  // namespace tandem::tokenizer
