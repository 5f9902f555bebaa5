#include "tokenizer/chat_template.h"

#include <gtest/gtest.h>

#include <filesystem>
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
  const auto reference = testing::ReadJsonFile(
      kFixtures + "/reference/tokenizers.json")["tokenizers"][GetParam()]["chat"];
  auto tokenizer = HfTokenizer::Load(kFixtures + "/" + GetParam());
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
  auto chat = ChatTemplate::OfTokenizer(*tokenizer);
  ASSERT_TRUE(chat.ok()) << chat.status();
  ASSERT_EQ(reference.size(), 6u);
  for (const auto& entry : reference) {
    std::vector<ChatMessage> messages;
    for (const auto& m : entry["messages"]) messages.push_back({m["role"], m["content"]});
    auto rendered = chat->Render(messages, entry["add_generation_prompt"].get<bool>());
    ASSERT_TRUE(rendered.ok()) << rendered.status();
    EXPECT_EQ(*rendered, entry["rendered"].get<std::string>());
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, ChatTemplateReference,
                         ::testing::Values("clip_llama", "siglip_qwen2"));

std::string ReadTemplate(const std::string& name) {
  std::ifstream in(std::string(TANDEM_CHAT_TEMPLATES) + "/" + name, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

const SpecialTokens kTokens{"<s>", "</s>", "", ""};

// What a guessed format got wrong: a ChatML template that writes BOS first keeps it, and Qwen2.5's
// default system message (which sits in the template's non-tools branch) is rendered.
TEST(ChatTemplate, RunsTheTemplateInsteadOfGuessingItsFormat) {
  auto bos =
      ChatTemplate::Compile("chatml_bos.jinja", ReadTemplate("chatml_bos.jinja"), kTokens, false);
  ASSERT_TRUE(bos.ok()) << bos.status();
  EXPECT_EQ(*bos->Render({{"user", "Hi"}}, true),
            "<s><|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
  auto qwen = ChatTemplate::Compile("qwen2_5.jinja", ReadTemplate("qwen2_5.jinja"), kTokens, false);
  ASSERT_TRUE(qwen.ok()) << qwen.status();
  EXPECT_EQ(*qwen->Render({{"user", "Hi"}}, true),
            "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful "
            "assistant.<|im_end|>\n"
            "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
  EXPECT_EQ(qwen->end_of_turn(), "<|im_end|>");
}

TEST(ChatTemplate, TrainsEachAnswerAndItsEndOfTurn) {
  auto chatml = ChatTemplate::Named("chatml", kTokens);
  ASSERT_TRUE(chatml.ok()) << chatml.status();
  auto pieces = chatml->RenderPieces(
      {{"user", "Sky?"}, {"assistant", "Blue."}, {"user", "Grass?"}, {"assistant", "Green."}},
      false);
  ASSERT_TRUE(pieces.ok()) << pieces.status();
  std::vector<std::string> trained;
  std::string joined;
  for (const ChatPiece& p : *pieces) {
    if (p.trained) trained.push_back(p.text);
    joined += p.text;
  }
  EXPECT_EQ(trained, (std::vector<std::string>{"Blue.<|im_end|>", "Green.<|im_end|>"}));
  EXPECT_EQ(
      joined,
      *chatml->Render(
          {{"user", "Sky?"}, {"assistant", "Blue."}, {"user", "Grass?"}, {"assistant", "Green."}},
          false));
  auto llama3 = ChatTemplate::Named("llama3", kTokens);
  ASSERT_TRUE(llama3.ok());
  EXPECT_EQ(llama3->end_of_turn(), "<|eot_id|>");
  auto tandem = ChatTemplate::Named("tandem", kTokens);
  ASSERT_TRUE(tandem.ok());
  EXPECT_EQ(tandem->end_of_turn(), "<eos>");
}

TEST(ChatTemplate, FindsTheEndOfTurnOfATemplateThatWantsASystemMessageFirst) {
  auto strict = ChatTemplate::Compile(
      "strict.jinja",
      "{% if messages[0].role != 'system' %}{{ raise_exception('system first') }}{% endif %}"
      "{% for m in messages %}{{ m.content }}<end>\n{% endfor %}",
      kTokens, false);
  ASSERT_TRUE(strict.ok()) << strict.status();
  EXPECT_EQ(strict->end_of_turn(), "<end>");
}

// LLaVA's processor template reads structured content and marks the answers with generation blocks.
TEST(ChatTemplate, AProcessorTemplateGetsPartsAndItsGenerationBlocksAreTheMask) {
  auto llava = ChatTemplate::Compile("chat_template.json", ReadTemplate("llava_processor.jinja"),
                                     kTokens, true);
  ASSERT_TRUE(llava.ok()) << llava.status();
  auto pieces =
      llava->RenderPieces({{"user", "<image>What is it?"}, {"assistant", "A cat."}}, false);
  ASSERT_TRUE(pieces.ok()) << pieces.status();
  ASSERT_EQ(pieces->size(), 2u);
  EXPECT_EQ((*pieces)[0].text, "USER: <image>\nWhat is it? ASSISTANT: ");
  EXPECT_FALSE((*pieces)[0].trained);
  EXPECT_EQ((*pieces)[1].text, "A cat. ");
  EXPECT_TRUE((*pieces)[1].trained);
}

TEST(ChatTemplate, ATemplateThatRewritesEarlierTurnsCannotBeMasked) {
  auto qwen3 = ChatTemplate::Compile("qwen3.jinja", ReadTemplate("qwen3.jinja"), kTokens, false);
  ASSERT_TRUE(qwen3.ok()) << qwen3.status();
  // Qwen3 keeps the reasoning of the turns after the last question only: the first answer's is gone
  // once a second question follows.
  auto pieces = qwen3->RenderPieces({{"user", "2+2?"},
                                     {"assistant", "<think>\nadd\n</think>\n\n4"},
                                     {"user", "3+3?"},
                                     {"assistant", "<think>\nagain\n</think>\n\n6"}},
                                    false);
  ASSERT_FALSE(pieces.ok());
  EXPECT_NE(pieces.status().message().find(
                "qwen3.jinja: the template does not render the conversation before "
                "message 1 as the start of the conversation through it"),
            std::string::npos)
      << pieces.status();
}

TEST(ChatTemplate, ErrorsNameTheTemplateAndTheLine) {
  auto broken = ChatTemplate::Compile("chat_template.jinja",
                                      "{% for m in messages %}\n{{ m.content }", kTokens, false);
  ASSERT_FALSE(broken.ok());
  EXPECT_EQ(std::string(broken.status().message()), "chat_template.jinja: line 2: unexpected '}'");
  auto gemma = ChatTemplate::Compile("gemma.jinja", ReadTemplate("gemma.jinja"), kTokens, false);
  ASSERT_TRUE(gemma.ok());
  auto raised = gemma->Render({{"system", "x"}, {"user", "y"}}, true);
  EXPECT_EQ(raised.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(std::string(raised.status().message()),
            "gemma.jinja: line 1: System role not supported");
  EXPECT_NE(ChatTemplate::Named("vicuna", kTokens)
                .status()
                .message()
                .find("\"vicuna\" is not known (chatml, llama3, tandem)"),
            std::string::npos);
}

// transformers 5 keeps a processor's template in processor_config.json, 4.4x in chat_template.json;
// chat_template.jinja beside them wins.
TEST(ChatTemplate, TheTokenizerReadsEveryFileATemplateIsSavedIn) {
  const std::filesystem::path dir =
      std::filesystem::path(::testing::TempDir()) / "chat_template_files";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  for (const char* file : {"tokenizer.json", "tokenizer_config.json"}) {
    std::filesystem::copy_file(kFixtures + "/siglip_qwen2/" + file, dir / file);
  }
  {
    auto plain = HfTokenizer::Load(dir.string());
    ASSERT_TRUE(plain.ok()) << plain.status();
    EXPECT_EQ(plain->chat_template_file(),
              "");  // this fixture keeps its template in chat_template.jinja
    EXPECT_EQ(ChatTemplate::OfTokenizer(*plain).status().code(),
              absl::StatusCode::kInvalidArgument);
  }
  std::ofstream(dir / "processor_config.json")
      << R"({"chat_template": "{{ messages[0].content[0].type }}", "image_processor": {}})";
  auto processor = HfTokenizer::Load(dir.string());
  ASSERT_TRUE(processor.ok()) << processor.status();
  EXPECT_EQ(processor->chat_template_file(), "processor_config.json");
  EXPECT_TRUE(processor->chat_template_structured());
  auto chat = ChatTemplate::OfTokenizer(*processor);
  ASSERT_TRUE(chat.ok()) << chat.status();
  EXPECT_EQ(*chat->Render({{"user", "<image>\nWhat?"}}, false), "image");
  std::ofstream(dir / "chat_template.json")
      << R"({"chat_template": "{{ messages[0].content[1].text }}"})";
  auto json_template = HfTokenizer::Load(dir.string());
  ASSERT_TRUE(json_template.ok());
  EXPECT_EQ(json_template->chat_template_file(), "chat_template.json");
  EXPECT_EQ(*ChatTemplate::OfTokenizer(*json_template)->Render({{"user", "<image>\nWhat?"}}, false),
            "\nWhat?");
  std::ofstream(dir / "chat_template.jinja") << "{{ messages[0].content }}";
  auto jinja = HfTokenizer::Load(dir.string());
  ASSERT_TRUE(jinja.ok());
  EXPECT_EQ(jinja->chat_template_file(), "chat_template.jinja");
  EXPECT_EQ(*ChatTemplate::OfTokenizer(*jinja)->Render({{"user", "<image>\nWhat?"}}, false),
            "<image>\nWhat?");
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace tandem::tokenizer
