// Tests for data/shard_index.cc (index.json: parse and write) and data/shard_manifest.cc (a
// checkpoint's record of its shards, checked on resume).
#include "data/shard_index.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "data/shard_manifest.h"
#include "tests/data/temp_dir.h"

namespace tandem::data {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;

ShardIndex TwoShards() {
  return ShardIndex{"train-{000000..000001}.tar",
                    5,
                    4,
                    {{"train-000000.tar", 3, 4096, 0x1a2b3c4d}, {"train-000001.tar", 2, 2048, 7}},
                    WordCounts{{"a", 3}, {"circle", 1}}};
}

TEST(ShardIndex, WritesAndParsesBack) {
  const std::string text = ShardIndexJson(TwoShards());
  EXPECT_THAT(text, HasSubstr("\"crc32\": \"1a2b3c4d\""));
  absl::StatusOr<ShardIndex> parsed = ParseShardIndex(text, "index.json");
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->pattern, "train-{000000..000001}.tar");
  EXPECT_EQ(parsed->samples, 5);
  EXPECT_EQ(parsed->images, 4);
  EXPECT_EQ(parsed->shards, TwoShards().shards);
  EXPECT_EQ(parsed->word_counts, TwoShards().word_counts);
  json without = json::parse(text);
  without.erase("word_counts");  // optional
  parsed = ParseShardIndex(without.dump(), "index.json");
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_FALSE(parsed->word_counts.has_value());
}

TEST(ShardIndex, ErrorsNameTheKey) {
  const json good = json::parse(ShardIndexJson(TwoShards()));
  const auto error = [&](const std::function<void(json&)>& edit) {
    json index = good;
    edit(index);
    return std::string(ParseShardIndex(index.dump(), "d/index.json").status().message());
  };
  EXPECT_THAT(std::string(ParseShardIndex("{", "d/index.json").status().message()),
              HasSubstr("d/index.json: "));
  EXPECT_THAT(error([](json& j) { j["format"] = "other"; }),
              HasSubstr("d/index.json: not a shard index"));
  EXPECT_EQ(error([](json& j) { j["shards"][1]["crc32"] = "xyz"; }),
            "d/index.json: shards[1].crc32: must be 8 hex digits");
  EXPECT_EQ(error([](json& j) { j["shards"][0]["samples"] = -1; }),
            "d/index.json: shards[0].samples: must be a non-negative integer");
  EXPECT_EQ(error([](json& j) { j["shards"][0]["file"] = "../x.tar"; }),
            "d/index.json: shards[0].file: must name a file in the index's directory, got "
            "\"../x.tar\"");
  EXPECT_EQ(error([](json& j) { j["samples"] = 6; }),
            "d/index.json: samples: is 6, its shards hold 5");
  EXPECT_EQ(error([](json& j) { j["shards"] = json::array(); }),
            "d/index.json: shards: must be a list of at least one shard");
  EXPECT_EQ(error([](json& j) { j["word_counts"]["a"] = "many"; }),
            "d/index.json: word_counts[\"a\"]: must be a non-negative integer");
}

TEST(ShardManifest, AcceptsTheSameShardsAndNamesTheFirstThatChanged) {
  testing::TempDir dir;
  const std::string path = dir / "data.json";
  std::vector<ShardInfo> shards = {{"/data/train-000000.tar", 3, 4096, 0x1a2b3c4d},
                                   {"/data/train-000001.tar", 2, 2048, std::nullopt}};
  EXPECT_TRUE(CheckShardManifest(path, shards).ok());  // none saved: data held whole
  std::ofstream(path) << ShardManifestJson(shards);
  EXPECT_TRUE(CheckShardManifest(path, shards).ok());
  shards[0].path = "/moved/train-000000.tar";  // the directory may move
  EXPECT_TRUE(CheckShardManifest(path, shards).ok());
  shards[1].samples = 4;
  const absl::Status changed = CheckShardManifest(path, shards);
  EXPECT_EQ(changed.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(std::string(changed.message()),
            path +
                ": shard 1 was train-000001.tar (2 samples, 2048 bytes), it is now "
                "train-000001.tar (4 samples, 2048 bytes): the training shards changed since "
                "this checkpoint, so its data position would name other samples (restore the "
                "shards it was trained on, or start a new run)");
  shards[1].samples = 2;
  shards[0].crc32 = 0x1a2b3c4e;
  EXPECT_THAT(std::string(CheckShardManifest(path, shards).message()),
              HasSubstr("shard 0 was train-000000.tar (3 samples, 4096 bytes, CRC-32 1a2b3c4d)"));
  shards.pop_back();
  EXPECT_THAT(std::string(CheckShardManifest(path, shards).message()),
              HasSubstr("the checkpoint was trained on 2 shards, the job names 1"));
  std::ofstream(path, std::ios::trunc) << R"({"format": "x"})";
  EXPECT_EQ(CheckShardManifest(path, shards).code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace tandem::data
