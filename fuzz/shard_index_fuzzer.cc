// libFuzzer target: a shard index (index.json, data/shard_index.h: ParseShardIndex) on arbitrary
// bytes. Beyond "no crash, no hang, no leak": an error has a message naming the file; an index that
// parses writes back (ShardIndexJson) to text that parses to the same shards, counts and words,
// and its shards' samples add up to its "samples".
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "data/shard_index.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<tandem::data::ShardIndex> index =
      tandem::data::ParseShardIndex(text, "index.json");
  if (!index.ok()) {
    if (std::string(index.status().message()).rfind("index.json: ", 0) != 0) {
      std::fprintf(stderr, "an error that does not name the file: %s\n",
                   std::string(index.status().message()).c_str());
      std::abort();
    }
    return 0;
  }
  int64_t samples = 0;
  for (const auto& shard : index->shards) samples += shard.samples;
  if (samples != index->samples) std::abort();
  absl::StatusOr<tandem::data::ShardIndex> again =
      tandem::data::ParseShardIndex(tandem::data::ShardIndexJson(*index), "index.json");
  if (!again.ok()) {
    std::fprintf(stderr, "written back, it does not parse: %s\n",
                 std::string(again.status().message()).c_str());
    std::abort();
  }
  if (again->shards != index->shards || again->samples != index->samples ||
      again->images != index->images || again->pattern != index->pattern ||
      again->word_counts != index->word_counts) {
    std::abort();
  }
  return 0;
}
