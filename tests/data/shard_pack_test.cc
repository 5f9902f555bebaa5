#include "data/shard_pack.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "common/atomic_file.h"
#include "data/conversation_dataset.h"
#include "data/image.h"
#include "data/shard_dataset.h"
#include "tests/data/temp_dir.h"
#include "tests/data/test_files.h"

namespace tandem::data {
namespace {

using ::testing::HasSubstr;

void WritePng(const std::string& path, int seed) {
  ASSERT_TRUE(WritePng(testing::PatternImage(8, 5, seed), path).ok());
}

TEST(ParseByteSize, UnitsAndErrors) {
  EXPECT_EQ(*ParseByteSize("512MB"), 512'000'000);
  EXPECT_EQ(*ParseByteSize("1GiB"), int64_t{1} << 30);
  EXPECT_EQ(*ParseByteSize("4096"), 4096);
  EXPECT_EQ(*ParseByteSize("2kib"), 2048);
  EXPECT_THAT(std::string(ParseByteSize("12 MB").status().message()),
              HasSubstr("size \"12 MB\": expected a number of at least 1 KiB"));
  EXPECT_FALSE(ParseByteSize("100").ok());  // under 1 KiB
  EXPECT_FALSE(ParseByteSize("MB").ok());
}

// Conversations packed into shards read back as the same samples: texts, image order, pixels.
TEST(PackShards, ConversationsReadBackFromTheirShards) {
  testing::TempDir dir;
  WritePng(dir / "a.png", 1);
  WritePng(dir / "b.png", 2);
  WritePng(dir / "c.png", 3);
  const std::string input = dir / "train.jsonl";
  std::ofstream(input)
      << R"({"image": ["b.png", "a.png"], "conversations": [{"from": "human", "value": "<image><image>Which?"}, {"from": "gpt", "value": "Left."}]})"
      << "\n"
      << R"({"conversations": [{"from": "human", "value": "Hi?"}, {"from": "gpt", "value": "Hello."}]})"
      << "\n"
      << R"({"images": ["c.png"], "messages": [{"role": "user", "content": "<image>Colour?"}, {"role": "assistant", "content": "Red."}]})"
      << "\n";
  PackOptions options;
  options.shard_bytes = 2048;  // a sample with an image fills a shard
  absl::StatusOr<PackResult> packed = PackShards(input, dir / "out", options);
  ASSERT_TRUE(packed.ok()) << packed.status();
  EXPECT_EQ(packed->samples, 3);
  EXPECT_EQ(packed->images, 3);
  ASSERT_EQ(packed->shards.size(), 3u);
  EXPECT_EQ(packed->pattern, "train-{000000..000002}.tar");
  absl::StatusOr<std::string> index = ReadFile(dir / "out/index.json");
  ASSERT_TRUE(index.ok()) << index.status();
  const nlohmann::json j = nlohmann::json::parse(*index);
  EXPECT_EQ(j["format"], "tandem-shards/1");
  EXPECT_EQ(j["shards"][1]["samples"], 1);
  EXPECT_EQ(j["shards"][0]["bytes"], packed->shards[0].bytes);
  EXPECT_EQ(j["shards"][0]["crc32"].get<std::string>().size(), 8u);

  auto shards = ShardDataset::Open({(dir / "out") + "/" + packed->pattern}, 5, nullptr, 2);
  ASSERT_TRUE(shards.ok()) << shards.status();
  EXPECT_EQ((*shards)->size(), 3);
  shards = ShardDataset::Open({dir / "out"}, 5, nullptr, 2);  // the directory: its index
  ASSERT_TRUE(shards.ok()) << shards.status();
  auto files = ConversationDataset::Open(input, 5, nullptr, false, {2, 8});
  ASSERT_TRUE(files.ok()) << files.status();
  ASSERT_EQ((*shards)->size(), 3);
  for (int64_t i = 0; i < 3; ++i) {
    EXPECT_EQ((*shards)->Text(i), (*files)->Text(i));
    ASSERT_EQ((*shards)->ImageCount(i), (*files)->ImageCount(i));
    for (int64_t k = 0; k < (*files)->ImageCount(i); ++k) {
      EXPECT_EQ((*shards)->GetImage(i, k)->pixels, (*files)->GetImage(i, k)->pixels)
          << "sample " << i << " image " << k;
    }
  }
  // Nothing already written is replaced.
  EXPECT_EQ(PackShards(input, dir / "out", options).status().code(),
            absl::StatusCode::kAlreadyExists);
}

TEST(PackShards, CaptionsBecomeCaptionSamples) {
  testing::TempDir dir;
  WritePng(dir / "a.png", 1);
  const std::string input = dir / "captions.jsonl";
  std::ofstream(input) << R"({"image": "a.png", "text": "a red circle"})"
                       << "\n";
  absl::StatusOr<PackResult> packed = PackShards(input, dir / "out", PackOptions{});
  ASSERT_TRUE(packed.ok()) << packed.status();
  EXPECT_EQ(packed->pattern, "train-000000.tar");
  auto shards = ShardDataset::Open({dir / "out/train-000000.tar"}, 5);
  ASSERT_TRUE(shards.ok()) << shards.status();
  EXPECT_EQ((*shards)->Text(0), "a red circle");
  EXPECT_EQ((*shards)->Messages(0)[0].content, "<image>");
  // An input error names the file and the entry.
  std::ofstream(dir / "bad.jsonl") << R"({"conversations": []})"
                                   << "\n";
  EXPECT_THAT(std::string(PackShards(dir / "bad.jsonl", dir / "out2", {}).status().message()),
              HasSubstr("bad.jsonl:1: conversations must be a non-empty list"));
}

}  // namespace
}  // namespace tandem::data
