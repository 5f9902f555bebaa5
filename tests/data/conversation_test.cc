// data/conversation.h against transformers: LLaVA-format conversations rendered with each fixture
// tokenizer's chat template (Llama 3, ChatML), tokenized, labelled on the answers only; ids and
// labels must equal what apply_chat_template, the tokenizers library and its offsets give.
#include "data/conversation.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <utility>

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
  EXPECT_EQ((*conversations)[0].images,
            std::vector<std::string>{kFixtures + "/reference/image.png"});
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
  EXPECT_NE(status.message().find("b.jsonl:3: has 1 image and 0 <image> marks"), std::string::npos)
      << status;
  status = read("c.jsonl", "{\"conversations\": [{\"from\": \"gpt\", \"value\": \"<image>\"}]}\n");
  EXPECT_NE(
      status.message().find("c.jsonl:1: conversations[0]: an image mark belongs in a human turn"),
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

// A file in `dir` named `name` holding `text`, read with `video_frames`.
absl::StatusOr<std::vector<Conversation>> ReadText(const fs::path& dir, const std::string& name,
                                                   const std::string& text,
                                                   int64_t video_frames = 8) {
  fs::create_directories(dir);
  std::ofstream(dir / name) << text;
  return ReadConversations((dir / name).string(), video_frames);
}

fs::path TempDir(const std::string& name) {
  return fs::path(::testing::TempDir()) / (name + "_" + std::to_string(::getpid()));
}

// LLaVA-OneVision's and LLaVA-Interleave's lists, text-only samples and ShareGPT's form: the
// images in the order of their marks, resolved against the file's directory.
TEST(Conversation, SamplesHoldAnyNumberOfImagesInEitherForm) {
  const fs::path dir = TempDir("conversation_images");
  auto read = ReadText(
      dir, "mixed.jsonl",
      R"({"image": ["a.png", "/abs/b.png"], "conversations": [{"from": "human", "value": "<image> and <image>: same?"}, {"from": "gpt", "value": "No."}]}
{"conversations": [{"from": "human", "value": "Hello"}, {"from": "gpt", "value": "Hi."}]}
{"images": ["c.png"], "messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "<image>What?"}, {"role": "assistant", "content": "A cat."}]}
{"image": "d.png", "conversations": [{"from": "human", "value": "<image>"}, {"from": "gpt", "value": "A dog."}]}
)");
  ASSERT_TRUE(read.ok()) << read.status();
  ASSERT_EQ(read->size(), 4u);
  EXPECT_EQ((*read)[0].images, (std::vector<std::string>{(dir / "a.png").string(), "/abs/b.png"}));
  EXPECT_FALSE((*read)[0].video);
  EXPECT_EQ((*read)[0].messages[0].content, "<image> and <image>: same?");
  EXPECT_TRUE((*read)[1].images.empty());
  EXPECT_EQ((*read)[2].images, std::vector<std::string>{(dir / "c.png").string()});
  ASSERT_EQ((*read)[2].messages.size(), 3u);
  EXPECT_EQ((*read)[2].messages[0].role, "system");
  EXPECT_EQ((*read)[2].messages[1].role, "user");
  EXPECT_EQ((*read)[2].messages[2].role, "assistant");
  EXPECT_EQ((*read)[2].source, (dir / "mixed.jsonl").string() + ":3");
  EXPECT_EQ((*read)[3].images.size(), 1u);
  fs::remove_all(dir);
}

// As numpy.linspace(0, n - 1, k, dtype=int), which LLaVA-Video samples frames with.
TEST(Conversation, VideoFramesAreSampledAsLlavaVideoSamplesThem) {
  EXPECT_EQ(VideoFrameIndices(10, 4), (std::vector<int64_t>{0, 3, 6, 9}));
  EXPECT_EQ(VideoFrameIndices(11, 4), (std::vector<int64_t>{0, 3, 6, 10}));
  EXPECT_EQ(VideoFrameIndices(5, 1), (std::vector<int64_t>{0}));
  EXPECT_EQ(VideoFrameIndices(3, 3), (std::vector<int64_t>{0, 1, 2}));
  EXPECT_EQ(VideoFrameIndices(100, 6), (std::vector<int64_t>{0, 19, 39, 59, 79, 99}));

  const fs::path dir = TempDir("conversation_video");
  std::string frames;
  for (int i = 0; i < 10; ++i) frames += (i ? ", " : "") + ("\"f" + std::to_string(i) + ".png\"");
  auto read = ReadText(
      dir, "video.jsonl",
      R"({"video": [)" + frames +
          R"(], "conversations": [{"from": "human", "value": "<video>\nWhat happens?"}, {"from": "gpt", "value": "It spins."}]}
{"video": [)" +
          frames +
          R"(], "conversations": [{"from": "human", "value": "<image>Again?"}, {"from": "gpt", "value": "Yes."}]}
)",
      /*video_frames=*/4);
  ASSERT_TRUE(read.ok()) << read.status();
  const Conversation& video = (*read)[0];
  EXPECT_TRUE(video.video);
  EXPECT_EQ(video.images,
            (std::vector<std::string>{(dir / "f0.png").string(), (dir / "f3.png").string(),
                                      (dir / "f6.png").string(), (dir / "f9.png").string()}));
  // One mark for the video becomes one <image> a frame.
  EXPECT_EQ(video.messages[0].content, "<image><image><image><image>\nWhat happens?");
  EXPECT_EQ((*read)[1].messages[0].content, "<image><image><image><image>Again?");

  const absl::Status few =
      ReadText(dir, "few.jsonl",
               R"({"video": [)" + frames +
                   R"(], "conversations": [{"from": "human", "value": "<video>"}]})",
               /*video_frames=*/16)
          .status();
  EXPECT_EQ(few.message(), (dir / "few.jsonl").string() +
                               ":1: video has 10 frames, fewer than data.video_frames = 16");
  fs::remove_all(dir);
}

TEST(Conversation, MarksThatDoNotMatchTheImagesAreNamed) {
  const fs::path dir = TempDir("conversation_marks");
  const auto error = [&](const std::string& line) {
    absl::Status status = ReadText(dir, "bad.jsonl", line + "\n").status();
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << line;
    const std::string prefix = (dir / "bad.jsonl").string() + ":1: ";
    const std::string message(status.message());
    return message.rfind(prefix, 0) == 0 ? message.substr(prefix.size()) : message;
  };
  // Each line and the error it gets, after "<file>:1: ".
  const std::pair<std::string, std::string> cases[] = {
      {R"({"image": ["a.png", "b.png"], "conversations": [{"from": "human", "value": "<image>"}]})",
       "has 2 images and 1 <image> mark"},
      {R"({"conversations": [{"from": "human", "value": "<image><image>"}]})",
       "has 0 images and 2 <image> marks"},
      {R"({"image": [], "conversations": [{"from": "human", "value": "hi"}]})",
       "image must be a file name or a non-empty list of file names"},
      {R"({"image": ["a.png", 3], "conversations": [{"from": "human", "value": "<image><image>"}]})",
       "image[1] must be a file name"},
      {R"({"video": "clip.mp4", "conversations": [{"from": "human", "value": "<video>"}]})",
       "video must be a non-empty list of file names (a video is its frames as image files)"},
      {R"({"image": "a.png", "video": ["f.png"], "conversations": [{"from": "human", "value": "<image>"}]})",
       "has both an image and a video; a sample holds one or the other"},
      {R"({"video": ["f.png"], "conversations": [{"from": "human", "value": "<video><image>"}]})",
       "video has 1 frame, fewer than data.video_frames = 8"},
      {R"({"image": "a.png", "conversations": [{"from": "human", "value": "<video>"}]})",
       "has a <video> mark but no video"},
      {R"({"images": ["a.png"], "messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "<image>"}]})",
       "messages[1]: an image mark belongs in a human turn"},
      {R"({"images": ["a.png"], "messages": [{"role": "bot", "content": "<image>"}]})",
       "messages[0].role \"bot\" is not user, assistant or system"},
      {R"({"images": ["a.png"], "messages": [{"from": "human", "value": "<image>"}]})",
       "messages[0] must be {\"role\": ..., \"content\": ...} with strings"},
  };
  for (const auto& [line, message] : cases) EXPECT_EQ(error(line), message) << line;
  fs::remove_all(dir);
}

// Every image must be a file when the dataset opens, and a sample may hold at most
// data.max_images_per_sample; GetImage reads them in order, and a text-only sample has none.
TEST(ConversationDataset, ImagesAreCheckedAtOpenAndReadInOrder) {
  const fs::path dir = TempDir("conversation_dataset_images");
  fs::create_directories(dir);
  fs::copy_file(kFixtures + "/reference/image.png", dir / "image.png",
                fs::copy_options::overwrite_existing);
  const std::string file = (dir / "train.jsonl").string();
  std::ofstream(file)
      << R"({"image": ["image.png", "image.png"], "conversations": [{"from": "human", "value": "<image><image>Same?"}, {"from": "gpt", "value": "Yes."}]})"
      << "\n"
      << R"({"conversations": [{"from": "human", "value": "Hi"}, {"from": "gpt", "value": "Hello."}]})"
      << "\n";
  const absl::Status over = ConversationDataset::Open(file, 8).status();
  EXPECT_EQ(over.message(), file + ":1: has 2 images, more than data.max_images_per_sample = 1");
  auto dataset = ConversationDataset::Open(file, 8, nullptr, false, {/*max_images_per_sample=*/2});
  ASSERT_TRUE(dataset.ok()) << dataset.status();
  EXPECT_EQ((*dataset)->ImageCount(0), 2);
  EXPECT_EQ((*dataset)->ImageCount(1), 0);
  auto second = (*dataset)->GetImage(0, 1);
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_EQ(second->height, 8);
  EXPECT_EQ((*dataset)->GetImage(0, 2).status().code(), absl::StatusCode::kOutOfRange);
  auto text_only = (*dataset)->Get(1);
  ASSERT_TRUE(text_only.ok()) << text_only.status();
  EXPECT_TRUE(text_only->image.pixels.empty());

  std::ofstream(dir / "missing.jsonl")
      << R"({"image": ["image.png", "gone.png"], "conversations": [{"from": "human", "value": "<image><image>"}]})"
      << "\n";
  const absl::Status missing =
      ConversationDataset::Open((dir / "missing.jsonl").string(), 8, nullptr, false, {2}).status();
  EXPECT_EQ(missing.code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(missing.message(), (dir / "missing.jsonl").string() + ":1: image " +
                                   (dir / "gone.png").string() + " is not a file");
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
