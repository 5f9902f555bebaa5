// `tandem data pack` and `tandem data inspect` as a user runs them: the examples' captions into
// shards and what they hold, their JSON, and their errors' exit codes (1 for what they cannot do,
// 2 for a bad flag).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>

#include "absl/strings/str_cat.h"
#include "tests/service/service_testing.h"

namespace tandem {
namespace {

using ::testing::HasSubstr;

TEST(DataCommand, PacksTheExampleCaptionsAndRefusesToOverwrite) {
  const std::string out = absl::StrCat(::testing::TempDir(), "data_pack_", ::getpid());
  std::filesystem::remove_all(out);
  const std::string input = absl::StrCat(TANDEM_EXAMPLES_DIR, "/jsonl/train.jsonl");
  const testing::Outcome packed = testing::Tandem(
      absl::StrCat("data pack ", input, " ", out, " --shard-size 16KiB --output json"));
  ASSERT_EQ(packed.exit_code, 0) << packed.output;
  const nlohmann::json result = nlohmann::json::parse(packed.output);
  EXPECT_EQ(result["samples"], 8);
  EXPECT_EQ(result["images"], 8);
  const size_t shards = result["shards"].size();
  EXPECT_GT(shards, 1u);
  EXPECT_EQ(result["pattern"], absl::StrCat("train-{000000..00000", shards - 1, "}.tar"));
  EXPECT_TRUE(std::filesystem::exists(out + "/index.json"));
  const testing::Outcome again = testing::Tandem(absl::StrCat("data pack ", input, " ", out));
  EXPECT_EQ(again.exit_code, 1);
  EXPECT_THAT(again.output, HasSubstr("tandem data pack: " + out + " already holds index.json"));
  const testing::Outcome size =
      testing::Tandem(absl::StrCat("data pack ", input, " ", out, "-2 --shard-size 1TB"));
  EXPECT_EQ(size.exit_code, 2);
  EXPECT_THAT(size.output, HasSubstr("--shard-size: size \"1TB\""));
  const testing::Outcome help = testing::Tandem("data pack --help");
  for (const char* flag : {"--shard-size", "--prefix", "--video-frames", "--output"}) {
    EXPECT_THAT(help.output, HasSubstr(flag));
  }

  // What the shards hold: eight 32 x 32 images of one a sample, captions of 7 or 8 words (9 or 10
  // tokens with <bos> and <eos>), the first two shown.
  const testing::Outcome inspected =
      testing::Tandem(absl::StrCat("data inspect ", out, " --first 2 --output json"));
  ASSERT_EQ(inspected.exit_code, 0) << inspected.output;
  const nlohmann::json report = nlohmann::json::parse(inspected.output);
  EXPECT_EQ(report["samples"], 8);
  EXPECT_EQ(report["shards"], shards);
  EXPECT_EQ(report["images_per_sample"], nlohmann::json({{"1", 8}}));
  EXPECT_EQ(report["image_sizes"],
            nlohmann::json::parse(R"([{"height": 32, "width": 32, "images": 8}])"));
  EXPECT_EQ(report["tokens"]["tokenizer"], "words");
  EXPECT_EQ(report["tokens"]["min"], 9);
  EXPECT_EQ(report["tokens"]["max"], 10);
  EXPECT_EQ(report["tokens"]["histogram"],
            nlohmann::json::parse(R"([{"from": 0, "to": 8, "samples": 0},
                                      {"from": 8, "to": 16, "samples": 8}])"));
  ASSERT_EQ(report["first"].size(), 2u);
  EXPECT_EQ(report["first"][1]["messages"][1]["content"], "a large purple square at the right");
  EXPECT_EQ(report["first"][1]["tokens"], 9);
  const testing::Outcome text = testing::Tandem(absl::StrCat("data inspect ", out));
  ASSERT_EQ(text.exit_code, 0) << text.output;
  EXPECT_THAT(text.output, HasSubstr(absl::StrCat("8 samples in ", shards, " shards; 8 images")));
  EXPECT_THAT(text.output, HasSubstr("image sizes (height x width): 32x32: 8"));
  EXPECT_THAT(text.output,
              HasSubstr("text tokens (words): min 9, median 9, p90 10, p99 10, max 10"));
  const testing::Outcome missing = testing::Tandem(absl::StrCat("data inspect ", out, "/none.tar"));
  EXPECT_EQ(missing.exit_code, 1);
  EXPECT_THAT(missing.output,
              HasSubstr("tandem data inspect: " + out + "/none.tar: cannot be read"));
  std::filesystem::remove_all(out);
}

}  // namespace
}  // namespace tandem
