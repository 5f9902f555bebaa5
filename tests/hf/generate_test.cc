// hf::Generate (`tandem generate`) against transformers: the image of tests/fixtures/hf/reference/
// through the checkpoint's preprocessor, a raw prompt and a chat prompt, 10 greedy tokens; the
// tokens, the prompt length and the decoded text must equal what transformers' processor and
// generate() gave.
#include "hf/generate.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "nlohmann/json.hpp"
#include "tests/testing/json_file.h"

namespace tandem::hf {
namespace {

namespace fs = std::filesystem;
const std::string kFixtures = TANDEM_HF_FIXTURES;

class GenerateReference : public ::testing::TestWithParam<std::string> {};

TEST_P(GenerateReference, TokensAndTextEqualTransformers) {
  const auto runs = testing::ReadJsonFile(kFixtures + "/reference/generate.json")[GetParam()];
  ASSERT_EQ(runs.size(), 2u);
  for (const auto& run : runs) {
    GenerateRequest request;
    request.model_dir = kFixtures + "/" + GetParam();
    request.images = {kFixtures + "/reference/image.png"};
    request.prompt = run["prompt"].get<std::string>();
    request.chat = run["chat"].get<bool>();
    request.max_new_tokens = 10;
    auto result = Generate(request);
    ASSERT_TRUE(result.ok()) << result.status();
    EXPECT_EQ(result->token_ids, run["token_ids"].get<std::vector<int64_t>>()) << request.prompt;
    EXPECT_EQ(result->prompt_tokens, run["prompt_tokens"].get<int64_t>()) << request.prompt;
    EXPECT_EQ(result->prompt_token_ids, run["prompt_token_ids"].get<std::vector<int64_t>>())
        << request.prompt;
    EXPECT_EQ(result->text, run["text"].get<std::string>()) << request.prompt;
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, GenerateReference,
                         ::testing::Values("clip_llama", "siglip_qwen2"));

// Each of `runs` ({"images", "prompt", "prompt_token_ids", "token_ids"}, images under reference/)
// generated from fixture `model`: the prompt's ids and 10 greedy tokens equal transformers'.
void ExpectGenerations(const nlohmann::json& runs, const std::string& model) {
  ASSERT_EQ(runs.size(), 2u);
  for (const auto& run : runs) {
    GenerateRequest request;
    request.model_dir = kFixtures + "/" + model;
    for (const auto& image : run["images"])
      request.images.push_back(kFixtures + "/reference/" + image.get<std::string>());
    request.prompt = run["prompt"].get<std::string>();
    request.max_new_tokens = 10;
    auto result = Generate(request);
    ASSERT_TRUE(result.ok()) << result.status();
    EXPECT_EQ(result->prompt_token_ids, run["prompt_token_ids"].get<std::vector<int64_t>>())
        << request.prompt;
    EXPECT_EQ(result->token_ids, run["token_ids"].get<std::vector<int64_t>>()) << request.prompt;
  }
}

// Two images in the order of their marks, and none: the tokens transformers generates.
TEST_P(GenerateReference, SeveralImagesOrNoneEqualTransformers) {
  ExpectGenerations(
      testing::ReadJsonFile(kFixtures + "/reference/multi_image.json")[GetParam()]["generate"],
      GetParam());
}

// LLaVA-NeXT checkpoints: each image cut into tiles by its size, its <image> mark expanded to
// its positions (base tile, unpadded grid, newlines), the tokens transformers generates.
class GenerateNextReference : public ::testing::TestWithParam<std::string> {};

TEST_P(GenerateNextReference, AnyResolutionImagesEqualTransformers) {
  ExpectGenerations(testing::ReadJsonFile(kFixtures + "/reference/" + GetParam() + ".json")["runs"],
                    GetParam());
}

INSTANTIATE_TEST_SUITE_P(Fixtures, GenerateNextReference,
                         ::testing::Values("clip_llama_next", "siglip_qwen2_next"));

TEST(Generate, BadInputIsNamed) {
  GenerateRequest request;
  request.model_dir = kFixtures + "/clip_llama";
  request.images = {kFixtures + "/reference/image.png"};
  request.prompt = "no marker";
  EXPECT_EQ(Generate(request).status().message(),
            "the prompt has 0 \"<image>\" marks for 1 --image: each image needs one mark, in "
            "order");
  request.prompt = "<image> <image> <image>";
  request.images.push_back(kFixtures + "/reference/image2.png");
  EXPECT_EQ(Generate(request).status().message(),
            "the prompt has 3 \"<image>\" marks for 2 --image files: each image needs one mark, "
            "in order");

  request.prompt = "<image> what?";
  request.images = {kFixtures + "/reference/absent.png"};
  auto status = Generate(request).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kNotFound);
  EXPECT_NE(status.message().find("absent.png"), std::string::npos) << status;

  const fs::path bad =
      fs::path(::testing::TempDir()) / ("not_an_image_" + std::to_string(::getpid()) + ".png");
  std::ofstream(bad) << "plain text";
  request.images = {bad.string()};
  status = Generate(request).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find(bad.filename().string()), std::string::npos) << status;
  fs::remove(bad);

  request.images.clear();
  EXPECT_EQ(Generate(request).status().message(),
            "the prompt has 1 \"<image>\" mark for 0 --image files: each image needs one mark, "
            "in order");

  request.model_dir = kFixtures + "/llama";
  request.prompt = "hello";
  EXPECT_NE(Generate(request).status().message().find("a llama model, not a LLaVA one"),
            std::string::npos);
  request.model_dir = kFixtures + "/absent";
  EXPECT_EQ(Generate(request).status().code(), absl::StatusCode::kNotFound);

  request.model_dir = kFixtures + "/clip_llama";
  request.chat = true;
  request.chat_template = "vicuna";
  EXPECT_NE(Generate(request).status().message().find("\"vicuna\" is not known"),
            std::string::npos);
}

}  // namespace
}  // namespace tandem::hf
