// data/conversation.h against transformers: LLaVA-format conversations rendered with each fixture
// tokenizer's chat template (Llama 3, ChatML), tokenized, labelled on the answers only; ids and
// labels must equal what apply_chat_template, the tokenizers library and its offsets give.
#include "data/conversation.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "data/conversation_dataset.h"
#include "tests/testing/json_file.h"

namespace tandem::data {
namespace {

namespace fs = std::filesystem;
const std::string kFixtures = TANDEM_HF_FIXTURES;

class ConversationReference : public ::testing::TestWithParam<std::string> {};

TEST_P(ConversationReference, IdsAndLabelsEqualTransformers) {
  const auto expected = testing::ReadJsonFile(kFixtures + "/reference/conversations_encoded.json");
  auto conversations = ReadConversations(kFixtures + "/reference/conversations.json");
  ASSERT_TRUE(conversations.ok()) << conversations.status();
  ASSERT_EQ(conversations->size(), 3u);
  EXPECT_EQ((*conversations)[0].image, kFixtures + "/reference/image.png");
  EXPECT_EQ((*conversations)[1].messages[0].role, "system");
  auto tokenizer = tokenizer::HfTokenizer::Load(kFixtures + "/" + GetParam());
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
  auto format = tokenizer::ChatTemplate::OfTokenizer(*tokenizer);
  ASSERT_TRUE(format.ok());
  for (size_t i = 0; i < conversations->size(); ++i) {
    auto encoded = EncodeConversation((*conversations)[i], *tokenizer, *format,
                                      expected["image_tokens"].get<int64_t>());
    ASSERT_TRUE(encoded.ok()) << encoded.status();
    EXPECT_EQ(encoded->ids, expected[GetParam()][i]["ids"].get<std::vector<int64_t>>()) << i;
    EXPECT_EQ(encoded->labels, expected[GetParam()][i]["labels"].get<std::vector<int64_t>>()) << i;
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, ConversationReference,
                         ::testing::Values("clip_llama", "siglip_qwen2"));

TEST(Conversation, BadEntriesAreNamedByIndexOrLine) {
  const fs::path dir =
      fs::path(::testing::TempDir()) / ("conversations_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const auto read = [&](const std::string& name, const std::string& text) {
    std::ofstream(dir / name) << text;
    return ReadConversations((dir / name).string()).status();
  };
  absl::Status status = read("a.json", R"([{"conversations": [{"from": "human", "value": "hi"}]},
      {"conversations": [{"from": "bot", "value": "hi"}]}])");
  EXPECT_NE(status.message().find(
                "a.json: [1]: conversations[0].from \"bot\" is not human, gpt or system"),
            std::string::npos)
      << status;
  status = read(
      "b.jsonl",
      "{\"conversations\": [{\"from\": \"human\", \"value\": \"hi\"}]}\n\n{\"image\": \"x.png\", "
      "\"conversations\": [{\"from\": \"human\", \"value\": \"no mark\"}]}\n");
  EXPECT_NE(status.message().find("b.jsonl:3: has an image and 0 <image> marks, not 1"),
            std::string::npos)
      << status;
  status = read("c.jsonl", "{\"conversations\": [{\"from\": \"gpt\", \"value\": \"<image>\"}]}\n");
  EXPECT_NE(
      status.message().find("c.jsonl:1: conversations[0]: <image> belongs once in a human turn"),
      std::string::npos)
      << status;
  status = read("d.jsonl", "{\"conversations\": []}\n");
  EXPECT_NE(status.message().find("conversations must be a non-empty list"), std::string::npos)
      << status;
  status = read("f.jsonl",
                "{\"image\": \"x.png\\u0000.txt\", \"conversations\": [{\"from\": \"human\", "
                "\"value\": \"<image>\"}]}\n");
  EXPECT_NE(status.message().find("f.jsonl:1: image contains a NUL character"), std::string::npos)
      << status;
  status = read("e.jsonl", "{\"conversations\": \n");
  EXPECT_NE(status.message().find("e.jsonl:1: line 1"), std::string::npos) << status;
  EXPECT_EQ(ReadConversations((dir / "absent.json").string()).status().code(),
            absl::StatusCode::kNotFound);
  fs::remove_all(dir);
}

// As for jsonl files: an image outside the file's directory is refused unless
// data.allow_images_outside.
TEST(ConversationDataset, AnImageOutsideTheFilesDirectoryIsRefusedUnlessAllowed) {
  const fs::path dir =
      fs::path(::testing::TempDir()) / ("conversation_images_" + std::to_string(::getpid()));
  fs::create_directories(dir / "lists");
  fs::copy_file(kFixtures + "/reference/image.png", dir / "image.png",
                fs::copy_options::overwrite_existing);
  const std::string file = (dir / "lists" / "train.json").string();
  std::ofstream(file)
      << R"([{"image": "../image.png", "conversations": [{"from": "human", "value": "<image>"},)"
      << R"( {"from": "gpt", "value": "A circle."}]}])";
  const absl::Status refused = ConversationDataset::Open(file, 8).status();
  EXPECT_EQ(refused.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(refused.message().find("[0]: image " + (dir / "lists" / ".." / "image.png").string() +
                                   " is outside " + (dir / "lists").string()),
            std::string::npos)
      << refused;
  EXPECT_NE(refused.message().find("set data.allow_images_outside to true"), std::string::npos)
      << refused;
  EXPECT_TRUE(ConversationDataset::Open(file, 8, nullptr, /*allow_images_outside=*/true).ok());
  fs::remove_all(dir);
}

}  // namespace
}  // namespace tandem::data
