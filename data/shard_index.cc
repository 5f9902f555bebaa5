#include "data/shard_index.h"

#include <zlib.h>

#include <cstdint>
#include <fstream>
#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "common/strict_json.h"

namespace tandem::data {
namespace {

using nlohmann::json;

// An integer in [0, 2^63).
bool NonNegativeInteger(const json& value) {
  if (value.is_number_unsigned()) return value.get<uint64_t>() <= uint64_t{INT64_MAX};
  return value.is_number_integer() && value.get<int64_t>() >= 0;
}

}  // namespace

absl::StatusOr<ShardIndex> ParseShardIndex(const std::string& text, const std::string& path) {
  const auto bad = [&](const std::string& key, const std::string& why) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": ", key, key.empty() ? "" : ": ", why));
  };
  absl::StatusOr<json> parsed = ParseJsonStrict(text);
  if (!parsed.ok()) return bad("", std::string(parsed.status().message()));
  const json& root = *parsed;
  if (!root.is_object() || !root.contains("format") || root["format"] != kShardIndexFormat) {
    return bad("",
               absl::StrCat("not a shard index (tandem data pack writes one with \"format\": \"",
                            kShardIndexFormat, "\")"));
  }
  ShardIndex index;
  if (!root.contains("pattern") || !root["pattern"].is_string())
    return bad("pattern", "must be a string");
  index.pattern = root["pattern"].get<std::string>();
  for (const char* key : {"samples", "images"}) {
    if (!root.contains(key) || !NonNegativeInteger(root[key]))
      return bad(key, "must be a non-negative integer");
  }
  index.samples = root["samples"].get<int64_t>();
  index.images = root["images"].get<int64_t>();
  if (!root.contains("shards") || !root["shards"].is_array() || root["shards"].empty())
    return bad("shards", "must be a list of at least one shard");
  int64_t samples = 0;
  for (size_t i = 0; i < root["shards"].size(); ++i) {
    const json& entry = root["shards"][i];
    const std::string at = absl::StrCat("shards[", i, "]");
    if (!entry.is_object()) return bad(at, "must be an object");
    if (!entry.contains("file") || !entry["file"].is_string())
      return bad(at + ".file", "must be a string");
    ShardInfo shard;
    shard.path = entry["file"].get<std::string>();
    if (shard.path.empty() || shard.path == "." || shard.path == ".." ||
        shard.path.find('/') != std::string::npos || shard.path.find('\0') != std::string::npos) {
      return bad(at + ".file", absl::StrCat("must name a file in the index's directory, got \"",
                                            shard.path.substr(0, 64), "\""));
    }
    for (const char* key : {"samples", "bytes"}) {
      if (!entry.contains(key) || !NonNegativeInteger(entry[key]))
        return bad(absl::StrCat(at, ".", key), "must be a non-negative integer");
    }
    shard.samples = entry["samples"].get<int64_t>();
    shard.bytes = entry["bytes"].get<int64_t>();
    if (shard.samples > (int64_t{1} << 40) || shard.bytes > (int64_t{1} << 50))
      return bad(at, "samples or bytes out of range");
    if (!entry.contains("crc32") || !entry["crc32"].is_string() ||
        !(shard.crc32 = ParseCrc32(entry["crc32"].get<std::string>()))) {
      return bad(at + ".crc32", "must be 8 hex digits");
    }
    samples += shard.samples;
    index.shards.push_back(std::move(shard));
  }
  if (samples != index.samples) {
    return bad("samples", absl::StrCat("is ", index.samples, ", its shards hold ", samples));
  }
  if (root.contains("word_counts")) {
    const json& counts = root["word_counts"];
    if (!counts.is_object()) return bad("word_counts", "must be an object of word counts");
    WordCounts words;
    for (const auto& [word, count] : counts.items()) {
      if (!NonNegativeInteger(count))
        return bad(absl::StrCat("word_counts[\"", word.substr(0, 64), "\"]"),
                   "must be a non-negative integer");
      words.emplace(word, count.get<int64_t>());
    }
    index.word_counts = std::move(words);
  }
  return index;
}

std::string ShardIndexJson(const ShardIndex& index) {
  json root = {{"format", kShardIndexFormat},
               {"pattern", index.pattern},
               {"samples", index.samples},
               {"images", index.images},
               {"shards", json::array()}};
  for (const ShardInfo& s : index.shards) {
    json entry = {{"file", s.path}, {"samples", s.samples}, {"bytes", s.bytes}};
    if (s.crc32) entry["crc32"] = FormatCrc32(*s.crc32);
    root["shards"].push_back(std::move(entry));
  }
  if (index.word_counts) root["word_counts"] = *index.word_counts;
  // Invalid UTF-8 in a word (a text's bytes kept as they are) is replaced rather than refused.
  return root.dump(1, ' ', false, json::error_handler_t::replace) + "\n";
}

absl::StatusOr<uint32_t> FileCrc32(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat(path, ": cannot be read"));
  uLong crc = crc32(0L, Z_NULL, 0);
  std::string buffer(1 << 16, '\0');
  while (in) {
    in.read(buffer.data(), static_cast<std::streamsize>(buffer.size()));
    crc = crc32(crc, reinterpret_cast<const Bytef*>(buffer.data()), static_cast<uInt>(in.gcount()));
  }
  if (in.bad()) return absl::DataLossError(absl::StrCat(path, ": read error"));
  return static_cast<uint32_t>(crc);
}

}  // namespace tandem::data
