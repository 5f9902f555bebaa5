// `tandem data pack` as a user runs it: the examples' captions into shards, its JSON, and its
// errors' exit codes (1 for what it cannot pack, 2 for a bad flag).
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
  std::filesystem::remove_all(out);
}

}  // namespace
}  // namespace tandem
