// What a checkpoint remembers of a sharded training set, so that a resumed run can tell whether its
// shards changed: a position (epoch, offset) names other samples in other shards.
//
// Beside the weights, data.json:
//   {"format": "tandem-checkpoint-data/1",
//    "shards": [{"file": "train-000000.tar", "samples": 128, "bytes": 5242880, "crc32":
//    "1a2b3c4d"}]}
// with each shard's file name (not its directory: the data may move), and its CRC-32 when an index
// (`tandem data pack`) gave one.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"

namespace tandem::data {

struct ShardInfo {
  std::string path;  // as the data set opened it
  int64_t samples = 0;
  int64_t bytes = 0;
  std::optional<uint32_t> crc32;  // zlib's, of the whole file, from the shard index

  bool operator==(const ShardInfo&) const = default;
};

// The text of data.json for `shards`.
std::string ShardManifestJson(const std::vector<ShardInfo>& shards);

// OK when `manifest_path` does not exist (a checkpoint of data held whole) or lists the same shards
// (by file name, samples, bytes and CRC-32 where both know it). Otherwise FailedPrecondition
// naming the manifest and the first shard that differs; InvalidArgument for a manifest that is
// not one.
absl::Status CheckShardManifest(const std::string& manifest_path,
                                const std::vector<ShardInfo>& shards);

// "1a2b3c4d"; ParseCrc32 reads it back (nullopt for anything but 8 hex digits).
std::string FormatCrc32(uint32_t crc);
std::optional<uint32_t> ParseCrc32(const std::string& text);

}  // namespace tandem::data
