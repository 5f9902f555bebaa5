// index.json, which `tandem data pack` writes beside its shards (data/shard_pack.h) and a sharded
// data set opens from without scanning them (data/shard_dataset.h):
//
//   {"format": "tandem-shards/1", "pattern": "train-{000000..000003}.tar", "samples": 1000,
//    "images": 1200,
//    "shards": [{"file": "train-000000.tar", "samples": 250, "bytes": 536870400,
//                "crc32": "1a2b3c4d"}, ...],
//    "word_counts": {"a": 812, "circle": 97, ...}}
//
// `file` is a name in the index's directory; crc32 is zlib's, of the whole file, as 8 hex digits,
// so a reader can tell a changed shard; word_counts (optional) are the counts of the normalised
// words of every sample's text (data/tokenizer.h: CountWords), so a word tokenizer is built
// without reading the texts.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "data/shard_manifest.h"
#include "data/tokenizer.h"

namespace tandem::data {

inline constexpr char kShardIndexFormat[] = "tandem-shards/1";

struct ShardIndex {
  std::string pattern;
  int64_t samples = 0;
  int64_t images = 0;
  std::vector<ShardInfo> shards;  // path: the file's name in the index's directory
  std::optional<WordCounts> word_counts;
};

// Parses index.json's text; `path` names it in errors, which say which key is wrong
// ("index.json: shards[2].crc32: must be 8 hex digits"). The shards' samples must add up to
// "samples"; a file name must be a plain name (no directory, not "." or "..").
absl::StatusOr<ShardIndex> ParseShardIndex(const std::string& text, const std::string& path);

// index.json's text for `index`.
std::string ShardIndexJson(const ShardIndex& index);

// zlib's CRC-32 of the whole file. NotFound naming the file when it cannot be read.
absl::StatusOr<uint32_t> FileCrc32(const std::string& path);

}  // namespace tandem::data
