#include "data/shard_manifest.h"

#include <cctype>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/atomic_file.h"
#include "common/status_macros.h"
#include "common/strict_json.h"

namespace tandem::data {
namespace {

using nlohmann::json;
constexpr char kFormat[] = "tandem-checkpoint-data/1";

std::string FileName(const std::string& path) {
  return std::filesystem::path(path).filename().string();
}

std::string Describe(const std::string& file, int64_t samples, int64_t bytes,
                     const std::optional<uint32_t>& crc) {
  return absl::StrCat(file, " (", samples, " samples, ", bytes, " bytes",
                      crc ? absl::StrCat(", CRC-32 ", FormatCrc32(*crc)) : "", ")");
}

}  // namespace

std::string FormatCrc32(uint32_t crc) { return absl::StrFormat("%08x", crc); }

std::optional<uint32_t> ParseCrc32(const std::string& text) {
  if (text.size() != 8) return std::nullopt;
  for (char c : text)
    if (!std::isxdigit(static_cast<unsigned char>(c))) return std::nullopt;
  return static_cast<uint32_t>(std::stoul(text, nullptr, 16));
}

std::string ShardManifestJson(const std::vector<ShardInfo>& shards) {
  json list = json::array();
  for (const ShardInfo& shard : shards) {
    json entry = {
        {"file", FileName(shard.path)}, {"samples", shard.samples}, {"bytes", shard.bytes}};
    if (shard.crc32) entry["crc32"] = FormatCrc32(*shard.crc32);
    list.push_back(std::move(entry));
  }
  return json{{"format", kFormat}, {"shards", list}}.dump(1) + "\n";
}

absl::Status CheckShardManifest(const std::string& manifest_path,
                                const std::vector<ShardInfo>& shards) {
  std::error_code ec;
  if (!std::filesystem::exists(manifest_path, ec)) return absl::OkStatus();
  ASSIGN_OR_RETURN(const std::string text, ReadUserFile(manifest_path));
  absl::StatusOr<json> manifest = ParseJsonStrict(text);
  const auto invalid = [&](const std::string& why) {
    return absl::InvalidArgumentError(absl::StrCat(manifest_path, ": ", why));
  };
  if (!manifest.ok()) return invalid(std::string(manifest.status().message()));
  if (!manifest->is_object() || manifest->value("format", "") != kFormat ||
      !manifest->contains("shards") || !(*manifest)["shards"].is_array()) {
    return invalid(absl::StrCat("not a checkpoint's data manifest (\"format\": \"", kFormat,
                                "\" with a \"shards\" list)"));
  }
  const json& saved = (*manifest)["shards"];
  const auto changed = [&](const std::string& what) {
    return absl::FailedPreconditionError(absl::StrCat(
        manifest_path, ": ", what,
        ": the training shards changed since this checkpoint, so its data position would name "
        "other samples (restore the shards it was trained on, or start a new run)"));
  };
  if (saved.size() != shards.size()) {
    return changed(absl::StrCat("the checkpoint was trained on ", saved.size(),
                                " shards, the job names ", shards.size()));
  }
  for (size_t i = 0; i < shards.size(); ++i) {
    const json& entry = saved[i];
    if (!entry.is_object() || !entry.contains("file") || !entry["file"].is_string() ||
        !entry.contains("samples") || !entry["samples"].is_number_integer() ||
        !entry.contains("bytes") || !entry["bytes"].is_number_integer()) {
      return invalid(absl::StrCat("shard ", i, ": needs \"file\", \"samples\" and \"bytes\""));
    }
    std::optional<uint32_t> crc;
    if (entry.contains("crc32")) {
      crc =
          entry["crc32"].is_string() ? ParseCrc32(entry["crc32"].get<std::string>()) : std::nullopt;
      if (!crc) return invalid(absl::StrCat("shard ", i, ": \"crc32\" is not 8 hex digits"));
    }
    const ShardInfo& now = shards[i];
    const std::string file = entry["file"].get<std::string>();
    const int64_t samples = entry["samples"].get<int64_t>();
    const int64_t bytes = entry["bytes"].get<int64_t>();
    if (file != FileName(now.path) || samples != now.samples || bytes != now.bytes ||
        (crc && now.crc32 && *crc != *now.crc32)) {
      return changed(absl::StrCat("shard ", i, " was ", Describe(file, samples, bytes, crc),
                                  ", it is now ",
                                  Describe(FileName(now.path), now.samples, now.bytes, now.crc32)));
    }
  }
  return absl::OkStatus();
}

}  // namespace tandem::data
