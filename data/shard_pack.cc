#include "data/shard_pack.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/atomic_file.h"
#include "common/status_macros.h"
#include "common/strict_json.h"
#include "data/conversation.h"
#include "data/jsonl_dataset.h"
#include "data/shard_index.h"
#include "data/tar_shard.h"
#include "data/text_codec.h"

namespace tandem::data {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// One sample to write: its text member and its image files, in mark order.
struct PackSample {
  std::string text;  // KEY.json
  std::vector<std::string> images;
  std::string words;  // its vocabulary text (data/dataset.h: Dataset::Text)
};

std::string Lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return s;
}

// Whether `input` holds captions ({"image", "text"} lines): its first entry has "text" and
// neither "conversations" nor "messages".
absl::StatusOr<bool> HoldsCaptions(const std::string& input) {
  ASSIGN_OR_RETURN(const std::string text, ReadUserFile(input));
  const size_t first = text.find_first_not_of(" \t\r\n");
  if (first == std::string::npos) return absl::InvalidArgumentError(input + ": is empty");
  if (text[first] == '[') return false;  // a JSON list: conversations
  const size_t end = text.find('\n', first);
  absl::StatusOr<json> entry = ParseJsonStrict(text.substr(first, end - first));
  if (!entry.ok() || !entry->is_object()) return false;  // ReadConversations names the error
  return entry->contains("text") && !entry->contains("conversations") &&
         !entry->contains("messages");
}

absl::StatusOr<std::vector<PackSample>> ReadSamples(const std::string& input,
                                                    const PackOptions& options) {
  ASSIGN_OR_RETURN(const bool captions, HoldsCaptions(input));
  std::vector<PackSample> samples;
  if (captions) {
    ASSIGN_OR_RETURN(auto dataset, JsonlDataset::Open(input, /*image_size=*/1));
    for (int64_t i = 0; i < dataset->size(); ++i) {
      samples.push_back(
          {json{{"caption", dataset->Text(i)}}.dump(), {dataset->ImagePath(i)}, dataset->Text(i)});
    }
    return samples;
  }
  ASSIGN_OR_RETURN(std::vector<Conversation> conversations,
                   ReadConversations(input, options.video_frames));
  for (const Conversation& c : conversations) {
    json messages = json::array();
    for (const auto& m : c.messages) messages.push_back({{"role", m.role}, {"content", m.content}});
    samples.push_back(
        {json{{"messages", messages}}.dump(), c.images, ConversationWords(c.messages)});
  }
  return samples;
}

// A shard being written, with what its index entry needs.
struct OpenShard {
  TarWriter writer;
  PackedShard entry;
};

}  // namespace

absl::StatusOr<int64_t> ParseByteSize(const std::string& text) {
  size_t digits = 0;
  while (digits < text.size() && std::isdigit(static_cast<unsigned char>(text[digits]))) ++digits;
  const std::string unit = Lower(text.substr(digits));
  const std::vector<std::pair<std::string, int64_t>> units = {{"", 1},
                                                              {"b", 1},
                                                              {"kb", 1000},
                                                              {"mb", 1000000},
                                                              {"gb", 1000000000},
                                                              {"kib", 1 << 10},
                                                              {"mib", 1 << 20},
                                                              {"gib", int64_t{1} << 30}};
  for (const auto& [name, scale] : units) {
    if (digits == 0 || digits > 12 || unit != name) continue;
    const int64_t bytes = std::stoll(text.substr(0, digits)) * scale;
    if (bytes < 1024) break;
    return bytes;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("size \"", text,
                   "\": expected a number of at least 1 KiB with B, KB, MB, GB, KiB, MiB or "
                   "GiB, e.g. 512MB"));
}

absl::StatusOr<PackResult> PackShards(const std::string& input, const std::string& out_dir,
                                      const PackOptions& options) {
  std::error_code ec;
  fs::create_directories(out_dir, ec);
  if (ec) return absl::PermissionDeniedError(absl::StrCat(out_dir, ": ", ec.message()));
  const fs::path out(out_dir);
  const std::string first_shard = absl::StrFormat("%s-%06d.tar", options.prefix, 0);
  for (const fs::path& taken : {out / "index.json", out / first_shard}) {
    if (fs::exists(taken, ec)) {
      return absl::AlreadyExistsError(
          absl::StrCat(out_dir, " already holds ", taken.filename().string(),
                       ": choose an empty directory (nothing already written is replaced)"));
    }
  }
  ASSIGN_OR_RETURN(const std::vector<PackSample> samples, ReadSamples(input, options));
  PackResult result;
  std::vector<std::unique_ptr<OpenShard>> done;
  std::unique_ptr<OpenShard> shard;
  const auto finish = [&]() -> absl::Status {
    RETURN_IF_ERROR(shard->writer.Close());
    const std::string path = (out / shard->entry.file).string();
    shard->entry.bytes = static_cast<int64_t>(fs::file_size(path));
    ASSIGN_OR_RETURN(shard->entry.crc32, FileCrc32(path));
    result.shards.push_back(shard->entry);
    shard.reset();
    return absl::OkStatus();
  };
  for (size_t i = 0; i < samples.size(); ++i) {
    const std::string key = absl::StrFormat("%09d", i);
    std::vector<std::pair<std::string, std::string>> members = {{key + ".json", samples[i].text}};
    int64_t bytes = 1024 + static_cast<int64_t>(samples[i].text.size());
    for (size_t k = 0; k < samples[i].images.size(); ++k) {
      const std::string& image = samples[i].images[k];
      const std::string extension = Lower(fs::path(image).extension().string());
      if (extension != ".png" && extension != ".jpg" && extension != ".jpeg") {
        return absl::InvalidArgumentError(
            absl::StrCat(input, ": sample ", i, ": image ", image, " is not .png, .jpg or .jpeg"));
      }
      ASSIGN_OR_RETURN(std::string data, ReadUserFile(image));
      bytes += 1024 + static_cast<int64_t>(data.size());
      members.emplace_back(absl::StrCat(key, ".", k, extension), std::move(data));
    }
    if (shard != nullptr && shard->entry.samples > 0 &&
        shard->writer.bytes() + bytes > options.shard_bytes) {
      RETURN_IF_ERROR(finish());
    }
    if (shard == nullptr) {
      const std::string file =
          absl::StrFormat("%s-%06d.tar", options.prefix, static_cast<int>(result.shards.size()));
      ASSIGN_OR_RETURN(TarWriter writer, TarWriter::Create((out / file).string()));
      shard = std::make_unique<OpenShard>(OpenShard{std::move(writer), PackedShard{file}});
    }
    for (const auto& [name, data] : members) RETURN_IF_ERROR(shard->writer.Add(name, data));
    ++shard->entry.samples;
    ++result.samples;
    result.images += static_cast<int64_t>(samples[i].images.size());
  }
  if (shard != nullptr) RETURN_IF_ERROR(finish());
  const int last = static_cast<int>(result.shards.size()) - 1;
  result.pattern =
      last == 0 ? first_shard : absl::StrFormat("%s-{%06d..%06d}.tar", options.prefix, 0, last);
  ShardIndex index{result.pattern, result.samples, result.images, {}, WordCounts{}};
  for (const PackedShard& s : result.shards)
    index.shards.push_back({s.file, s.samples, s.bytes, s.crc32});
  for (const PackSample& sample : samples) CountWords(sample.words, *index.word_counts);
  RETURN_IF_ERROR(WriteFileAtomically((out / "index.json").string(), ShardIndexJson(index)));
  return result;
}

}  // namespace tandem::data
