// `tandem data pack`: a conversation file (LLaVA or ShareGPT, data/conversation.h) or a caption
// JSON Lines file ({"image", "text"}, data/jsonl_dataset.h) written as tar shards in WebDataset's
// layout (data/shard_dataset.h) plus an index, so that training reads shards instead of a file per
// image.
//
// Sample i becomes key "%09d" of i: KEY.json ({"messages": [...]} for a conversation, its video's
// sampled frames as images; {"caption": "..."} for a caption) and KEY.0.png, KEY.1.jpg, ... its
// image files byte for byte, in mark order. A shard takes samples until the next would take it
// past `shard_bytes` (a sample larger than that is a shard alone). OUT_DIR/index.json
// (data/shard_index.h) lists the shards with their sample counts, sizes and CRC-32s, and the
// word counts of the samples' texts.
//
// Nothing already saved is overwritten: an OUT_DIR that holds index.json or a shard of the prefix
// is refused. Errors name the input file and its entry (its errors as the datasets report them), or
// the shard being written.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace tandem::data {

struct PackOptions {
  int64_t shard_bytes = int64_t{512} << 20;
  std::string prefix = "train";  // shard files PREFIX-000000.tar, ...
  int64_t video_frames = 8;      // frames taken from each video (data.video_frames)
};

struct PackedShard {
  std::string file;  // its name in OUT_DIR
  int64_t samples = 0;
  int64_t bytes = 0;
  uint32_t crc32 = 0;
};

struct PackResult {
  std::vector<PackedShard> shards;
  int64_t samples = 0;
  int64_t images = 0;
  std::string pattern;  // the shards as data.shards names them, relative to OUT_DIR
};

absl::StatusOr<PackResult> PackShards(const std::string& input, const std::string& out_dir,
                                      const PackOptions& options);

// "512MB", "1GiB", "4096": bytes (KB, MB, GB are powers of 1000; KiB, MiB, GiB of 1024; case is
// ignored). InvalidArgument naming the text otherwise, or for less than 1 KiB.
absl::StatusOr<int64_t> ParseByteSize(const std::string& text);

}  // namespace tandem::data
