#include "data/shard_pack.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/atomic_file.h"
#include "data/conversation_dataset.h"
#include "data/image.h"
#include "data/shard_dataset.h"
#include "data/shard_index.h"
#include "data/tokenizer.h"
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

  auto shards = ShardDataset::Open({(dir / "out") + "/" + packed->pattern}, 5, nullptr, {2});
  ASSERT_TRUE(shards.ok()) << shards.status();
  EXPECT_EQ((*shards)->size(), 3);
  shards = ShardDataset::Open({dir / "out"}, 5, nullptr, {2});  // the directory: its index
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

// Ten one-image caption samples packed one a shard (captions "caption 0" ... "caption 9").
std::string PackTen(const testing::TempDir& dir) {
  const std::string input = dir / "ten.jsonl";
  std::ofstream out(input);
  for (int i = 0; i < 10; ++i) {
    WritePng(dir / ("i" + std::to_string(i) + ".png"), i);
    out << R"({"image": "i)" << i << R"(.png", "text": "caption )" << i << (i % 2 ? " odd" : "")
        << "\"}\n";
  }
  out.close();
  PackOptions options;
  options.shard_bytes = 1024;  // one sample a shard
  absl::StatusOr<PackResult> packed = PackShards(input, dir / "ten", options);
  EXPECT_TRUE(packed.ok()) << packed.status();
  EXPECT_EQ(packed.ok() ? packed->shards.size() : 0u, 10u);
  return dir / "ten";
}

// No rank holds the whole data set: a packed directory opens from its index without reading a
// shard, reads a shard's table when a sample of it is asked for, and keeps a bounded few.
TEST(PackShards, APackedDirectoryOpensFromItsIndexAndCachesABoundedFewTables) {
  testing::TempDir dir;
  const std::string packed = PackTen(dir);
  ShardDataset::Options options;
  options.shuffle_buffer = 1;  // budget: 2 windows of 1 + 3 shards of 1 = 5 samples
  auto opened = ShardDataset::Open({packed}, 5, nullptr, options);
  ASSERT_TRUE(opened.ok()) << opened.status();
  const ShardDataset& d = **opened;
  EXPECT_EQ(d.size(), 10);
  EXPECT_EQ(d.ShardSizes(), std::vector<int64_t>(10, 1));
  EXPECT_EQ(d.table_reads(), 0);
  EXPECT_EQ(d.cached_shards(), 0);
  for (int64_t i = 0; i < 10; ++i) {
    ASSERT_TRUE(d.Check(i).ok()) << d.Check(i);
    EXPECT_EQ(d.Text(i).substr(0, 9), "caption " + std::to_string(i));
  }
  EXPECT_EQ(d.table_reads(), 10);
  EXPECT_EQ(d.cached_shards(), 5);
  ASSERT_TRUE(d.Check(9).ok());  // still cached
  EXPECT_EQ(d.table_reads(), 10);
  ASSERT_TRUE(d.Check(0).ok());  // evicted: read again
  EXPECT_EQ(d.table_reads(), 11);
  EXPECT_EQ(d.cached_shards(), 5);
  // The index's word counts build the tokenizer the texts would, without reading a table.
  auto fresh = ShardDataset::Open({packed}, 5);
  ASSERT_TRUE(fresh.ok());
  const Tokenizer from_index = Tokenizer::FromCounts((*fresh)->VocabularyCounts());
  EXPECT_EQ((*fresh)->table_reads(), 0);
  EXPECT_EQ(from_index, Tokenizer::Build(AllTexts(d)));
  EXPECT_EQ(from_index.words()[4], "caption");
  EXPECT_EQ(from_index.words()[5], "odd");
  // Named by its shards' range instead, the counts come from reading every table once.
  auto ranged = ShardDataset::Open({packed + "/train-{000000..000009}.tar"}, 5);
  ASSERT_TRUE(ranged.ok()) << ranged.status();
  EXPECT_EQ((*ranged)->VocabularyCounts(), (*fresh)->VocabularyCounts());
}

// Threads reading samples at once (a vision rank's decode workers) each get their sample whole,
// while tables are read, shared and evicted under them.
TEST(PackShards, ThreadsReadSamplesWhileTablesComeAndGo) {
  testing::TempDir dir;
  const std::string packed = PackTen(dir);
  ShardDataset::Options options;
  options.shuffle_buffer = 1;  // 5 samples' tables at most: constant eviction
  auto opened = ShardDataset::Open({packed}, 5, nullptr, options);
  ASSERT_TRUE(opened.ok()) << opened.status();
  const ShardDataset& d = **opened;
  std::atomic<int> wrong{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int k = 0; k < 40; ++k) {
        const int64_t i = (k * 7 + t * 3) % 10;
        absl::StatusOr<Image> image = d.GetImage(i, 0);
        if (!d.Check(i).ok() || d.Text(i).substr(0, 9) != "caption " + std::to_string(i) ||
            !image.ok() || image->height != 5) {
          ++wrong;
        }
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  EXPECT_EQ(wrong.load(), 0);
  EXPECT_LE(d.cached_shards(), 5);
  EXPECT_GE(d.table_reads(), 10);
}

// A shard changed since it was packed is refused, naming it: by its size when the data set opens,
// by its sample count when its table is read, by its checksum when a resume verifies it.
TEST(PackShards, AShardChangedSincePackingIsRefused) {
  testing::TempDir dir;
  const std::string packed = PackTen(dir);
  const std::string shard3 = packed + "/train-000003.tar";
  absl::StatusOr<std::string> bytes = ReadFile(shard3);
  ASSERT_TRUE(bytes.ok());
  // Same size, one byte of its image changed: only the checksum tells.
  std::string changed = *bytes;
  changed[1536 + 20] ^= 0x01;  // inside its image (headers and text take 1536 bytes)
  std::ofstream(shard3, std::ios::binary | std::ios::trunc) << changed;
  auto opened = ShardDataset::Open({packed}, 5);
  ASSERT_TRUE(opened.ok()) << opened.status();
  EXPECT_TRUE((*opened)->VerifyShard(2).ok());
  const absl::Status verify = (*opened)->VerifyShard(3);
  EXPECT_EQ(verify.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(std::string(verify.message()), HasSubstr(shard3 + ": its CRC-32 is "));
  EXPECT_THAT(std::string(verify.message()), HasSubstr("the shard changed since it was packed"));
  // Another size: refused when the data set opens.
  std::ofstream(shard3, std::ios::binary | std::ios::app) << std::string(512, '\0');
  EXPECT_EQ(
      std::string(ShardDataset::Open({packed}, 5).status().message()),
      absl::StrCat(shard3, ": ", bytes->size() + 512, " bytes, ", packed, "/index.json says ",
                   bytes->size(), ": the shard changed since it was packed (pack the data again)"));
  // Same size, another sample count (the index edited to match the size): refused on reading.
  std::ofstream(shard3, std::ios::binary | std::ios::trunc) << *bytes;
  absl::StatusOr<std::string> index_text = ReadFile(packed + "/index.json");
  ASSERT_TRUE(index_text.ok());
  nlohmann::json index = nlohmann::json::parse(*index_text);
  index["shards"][3]["samples"] = 2;
  index["samples"] = 11;
  std::ofstream(packed + "/index.json", std::ios::trunc) << index.dump();
  opened = ShardDataset::Open({packed}, 5);
  ASSERT_TRUE(opened.ok()) << opened.status();
  EXPECT_EQ((*opened)->size(), 11);
  EXPECT_EQ(std::string((*opened)->Check(3).message()),
            shard3 + ": holds 1 samples, its index says 2: the shard changed since it was packed");
  EXPECT_EQ((*opened)->Describe(3), shard3 + ": sample 0");
}

// data.on_bad_sample "skip": a packed directory whose shard is missing or cut short opens, its
// samples there bad (named by Check), the others as packed.
TEST(PackShards, SkippingOpensADirectoryWithAMissingAndATruncatedShard) {
  testing::TempDir dir;
  const std::string packed = PackTen(dir);
  const std::string shard3 = packed + "/train-000003.tar";
  const std::string shard5 = packed + "/train-000005.tar";
  std::filesystem::remove(shard3);
  std::filesystem::resize_file(shard5, 520);  // inside its text
  EXPECT_EQ(ShardDataset::Open({packed}, 5).status().code(), absl::StatusCode::kNotFound);
  ShardDataset::Options skip;
  skip.skip_bad_samples = true;
  auto opened = ShardDataset::Open({packed}, 5, nullptr, skip);
  ASSERT_TRUE(opened.ok()) << opened.status();
  const ShardDataset& d = **opened;
  EXPECT_EQ(d.size(), 10);
  for (int64_t i : {0, 1, 2, 4, 6, 7, 8, 9}) EXPECT_TRUE(d.Check(i).ok()) << i;
  EXPECT_EQ(d.Check(3).code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(d.Check(3).message()), HasSubstr(shard3 + ": cannot open"));
  EXPECT_EQ(d.Check(5).code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(std::string(d.Check(5).message()), HasSubstr(shard5));
  EXPECT_TRUE(d.GetImage(4, 0).ok());
  // Their samples are skipped already: a resume does not refuse them.
  EXPECT_TRUE(d.VerifyShard(3).ok());
  EXPECT_TRUE(d.VerifyShard(5).ok());
}

}  // namespace
}  // namespace tandem::data
