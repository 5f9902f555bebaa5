#include "data/shard_dataset.h"

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/atomic_file.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "common/strict_json.h"
#include "data/shard_index.h"
#include "data/text_codec.h"

namespace tandem::data {
namespace {

using nlohmann::json;

bool IsImageField(const std::string& field) {
  const size_t dot = field.rfind('.');
  std::string extension = field.substr(dot == std::string::npos ? 0 : dot + 1);
  std::transform(extension.begin(), extension.end(), extension.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return extension == "png" || extension == "jpg" || extension == "jpeg";
}

// The number before a field's first dot ("0.png" -> 0), or -1 for a single image ("png").
int64_t ImageNumber(const std::string& field) {
  const size_t dot = field.find('.');
  if (dot == std::string::npos || dot == 0) return -1;
  int64_t number = 0;
  for (size_t i = 0; i < dot; ++i) {
    if (!std::isdigit(static_cast<unsigned char>(field[i])) || number > 1'000'000) return -1;
    number = number * 10 + (field[i] - '0');
  }
  return number;
}

// A directory `tandem data pack` wrote: its index.
absl::StatusOr<ShardIndex> ReadIndex(const std::string& directory) {
  const std::string path = (std::filesystem::path(directory) / "index.json").string();
  ASSIGN_OR_RETURN(const std::string text, ReadUserFile(path));
  return ParseShardIndex(text, path);
}

}  // namespace

absl::StatusOr<std::vector<std::string>> ExpandShardPattern(const std::string& pattern) {
  const size_t open = pattern.find('{');
  if (open == std::string::npos) {
    if (pattern.find('}') != std::string::npos)
      return absl::InvalidArgumentError(
          absl::StrCat("shard pattern ", pattern, ": '}' without '{'"));
    return std::vector<std::string>{pattern};
  }
  const size_t close = pattern.find('}', open);
  const size_t dots = pattern.find("..", open);
  const auto bad = [&](const std::string& why) {
    return absl::InvalidArgumentError(
        absl::StrCat("shard pattern ", pattern, ": ", why, " (write a range as {000000..000099})"));
  };
  if (close == std::string::npos) return bad("'{' is not closed");
  if (dots == std::string::npos || dots > close) return bad("no '..' in its braces");
  const std::string first = pattern.substr(open + 1, dots - open - 1);
  const std::string last = pattern.substr(dots + 2, close - dots - 2);
  const auto number = [](const std::string& s) {
    return !s.empty() && s.size() <= 9 &&
           std::all_of(s.begin(), s.end(), [](unsigned char c) { return std::isdigit(c); });
  };
  if (!number(first) || !number(last)) return bad("the ends of its range are not numbers");
  const int64_t from = std::stoll(first), to = std::stoll(last);
  if (to < from)
    return bad(absl::StrCat("its range ends before it begins (", to, " < ", from, ")"));
  ASSIGN_OR_RETURN(const std::vector<std::string> rests,
                   ExpandShardPattern(pattern.substr(close + 1)));
  std::vector<std::string> out;
  for (int64_t n = from; n <= to; ++n) {
    std::string digits = std::to_string(n);
    if (digits.size() < first.size()) digits.insert(0, first.size() - digits.size(), '0');
    for (const std::string& rest : rests)
      out.push_back(absl::StrCat(pattern.substr(0, open), digits, rest));
  }
  return out;
}

absl::StatusOr<std::unique_ptr<ShardDataset>> ShardDataset::Open(
    const std::vector<std::string>& patterns, int64_t image_size,
    std::shared_ptr<const ImagePreprocessor> preprocessor, Options options) {
  std::vector<ShardInfo> shards;
  std::vector<std::string> indexes;  // for each shard, the index that lists it ("": none)
  std::optional<WordCounts> words = WordCounts{};
  std::set<int> faulted;  // skipping: shards missing or not as indexed
  for (const std::string& named : patterns) {
    std::error_code ec;
    if (std::filesystem::is_directory(named, ec)) {
      ASSIGN_OR_RETURN(ShardIndex index, ReadIndex(named));
      for (ShardInfo& shard : index.shards) {
        shard.path = (std::filesystem::path(named) / shard.path).string();
        shards.push_back(std::move(shard));
        indexes.push_back((std::filesystem::path(named) / "index.json").string());
      }
      if (!index.word_counts) {
        words.reset();
      } else if (words) {
        for (const auto& [word, count] : *index.word_counts) (*words)[word] += count;
      }
      continue;
    }
    ASSIGN_OR_RETURN(std::vector<std::string> paths, ExpandShardPattern(named));
    for (std::string& path : paths) {
      shards.push_back({std::move(path), /*samples=*/-1, /*bytes=*/0, std::nullopt});
      indexes.emplace_back();
    }
  }
  if (shards.empty()) return absl::InvalidArgumentError("data.shards: no shard named");
  // An indexed shard is checked against its index by size here (its table, when read, by its
  // sample count); one without is read through once, to count its samples and its words.
  for (size_t s = 0; s < shards.size(); ++s) {
    ShardInfo& shard = shards[s];
    std::error_code ec;
    const auto bytes = std::filesystem::file_size(shard.path, ec);
    absl::Status fault;
    if (ec) {
      fault =
          absl::NotFoundError(absl::StrCat(shard.path, ": cannot be read (", ec.message(), ")",
                                           indexes[s].empty() ? "" : ", listed in ", indexes[s]));
    } else if (!indexes[s].empty() && static_cast<int64_t>(bytes) != shard.bytes) {
      fault = absl::DataLossError(
          absl::StrCat(shard.path, ": ", bytes, " bytes, ", indexes[s], " says ", shard.bytes,
                       ": the shard changed since it was packed (pack the data again)"));
    }
    // Skipping bad samples, a shard at fault is read for what it still holds: an indexed one's
    // samples are the index's (those it lacks are bad), one without an index has none if missing.
    if (!fault.ok()) {
      if (!options.skip_bad_samples) return fault;
      TANDEM_LOG(kWarning, "data") << fault.message() << "; its bad samples are skipped";
      faulted.insert(static_cast<int>(s));
      if (ec && indexes[s].empty()) {
        shard.samples = 0;
        continue;
      }
    }
    if (!indexes[s].empty()) continue;
    shard.bytes = static_cast<int64_t>(bytes);
    ASSIGN_OR_RETURN(const std::shared_ptr<const Table> table, ReadTable(shard, options));
    shard.samples = static_cast<int64_t>(table->samples.size());
    if (words) {
      for (const Sample& sample : table->samples) CountWords(WordsOf(sample), *words);
    }
  }
  auto dataset = std::unique_ptr<ShardDataset>(new ShardDataset(
      std::move(shards), image_size, std::move(preprocessor), options, std::move(words)));
  dataset->faulted_ = std::move(faulted);
  if (dataset->size() == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("data.shards: ", dataset->shards_.size(), " shards and no sample in them"));
  }
  return dataset;
}

ShardDataset::ShardDataset(std::vector<ShardInfo> shards, int64_t image_size,
                           std::shared_ptr<const ImagePreprocessor> preprocessor, Options options,
                           std::optional<WordCounts> words)
    : shards_(std::move(shards)),
      image_size_(image_size),
      preprocessor_(std::move(preprocessor)),
      options_(options),
      words_(std::move(words)) {
  begins_.assign(1, 0);
  int64_t largest = 0;
  for (const ShardInfo& shard : shards_) {
    begins_.push_back(begins_.back() + shard.samples);
    largest = std::max(largest, shard.samples);
  }
  // Two adjacent windows of the sampler's stream, with the shards cut at their ends.
  cache_samples_ = 2 * std::max<int64_t>(1, options_.shuffle_buffer) + 3 * largest;
}

std::string ShardDataset::WordsOf(const Sample& sample) {
  return sample.messages.empty() ? sample.caption : ConversationWords(sample.messages);
}

absl::StatusOr<ShardDataset::Sample> ShardDataset::ReadSample(const std::string& path,
                                                              const TarSample& tar,
                                                              int64_t max_images) {
  Sample sample;
  sample.key = tar.key;
  const std::string where = absl::StrCat(path, ": ", tar.key);
  const TarMember* text = nullptr;
  std::vector<std::pair<int64_t, size_t>> numbered;  // (number, member), for the order
  for (size_t m = 0; m < tar.members.size(); ++m) {
    if (tar.fields[m] == "json") text = &tar.members[m];
    if (IsImageField(tar.fields[m])) numbered.emplace_back(ImageNumber(tar.fields[m]), m);
  }
  if (text == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, " (byte ", tar.members.front().header_offset,
                     "): has no json member (its text: ", tar.key, ".json)"));
  }
  sample.offset = text->header_offset;
  std::stable_sort(numbered.begin(), numbered.end());
  for (const auto& [number, m] : numbered) sample.images.push_back(tar.members[m]);
  const int64_t images = static_cast<int64_t>(sample.images.size());
  const std::string source = absl::StrCat(where, " (byte ", sample.offset, ")");
  if (images > max_images) {
    return absl::InvalidArgumentError(absl::StrCat(
        source, ": has ", images, " images, more than data.max_images_per_sample = ", max_images));
  }
  ASSIGN_OR_RETURN(const std::string bytes, ReadTarMember(path, *text));
  absl::StatusOr<json> parsed = ParseJsonStrict(bytes);
  if (!parsed.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(source, ": ", parsed.status().message()));
  }
  if (parsed->is_object() && !parsed->contains("conversations") && !parsed->contains("messages")) {
    const char* key = parsed->contains("caption") ? "caption" : "text";
    if (!parsed->contains(key) || !(*parsed)[key].is_string() || images != 1) {
      return absl::InvalidArgumentError(
          absl::StrCat(source,
                       ": must hold \"conversations\" or \"messages\", or a \"caption\" (or "
                       "\"text\") string with one image; it has ",
                       images, images == 1 ? " image" : " images"));
    }
    sample.caption = (*parsed)[key].get<std::string>();
    return sample;
  }
  // The marks take the sample's image members: name them in place of any file names.
  if (parsed->is_object()) {
    parsed->erase("image");
    parsed->erase("images");
    parsed->erase("video");
    json names = json::array();
    for (const TarMember& image : sample.images) names.push_back(image.name);
    if (images > 0) (*parsed)[parsed->contains("messages") ? "images" : "image"] = names;
  }
  ASSIGN_OR_RETURN(Conversation conversation, ParseConversationJson(*parsed, source, /*base=*/""));
  sample.messages = std::move(conversation.messages);
  return sample;
}

absl::StatusOr<std::shared_ptr<const ShardDataset::Table>> ShardDataset::ReadTable(
    const ShardInfo& shard, const Options& options) {
  const std::string& path = shard.path;
  const bool skip = options.skip_bad_samples;
  auto table = std::make_shared<Table>();
  // Skipping, a shard that cannot be read at all is as many bad samples as its index lists (none
  // when it has no index).
  const auto all_bad =
      [&](const absl::Status& error) -> absl::StatusOr<std::shared_ptr<const Table>> {
    if (!skip) return error;
    for (int64_t i = 0; i < std::max<int64_t>(0, shard.samples); ++i) {
      Sample& bad = table->samples.emplace_back();
      bad.error = error;
    }
    return std::shared_ptr<const Table>(std::move(table));
  };
  absl::Status cut_short;
  absl::StatusOr<std::vector<TarMember>> members = ScanTar(path, skip ? &cut_short : nullptr);
  if (!members.ok()) return all_bad(members.status());
  absl::StatusOr<std::vector<TarSample>> grouped = GroupTarSamples(path, *std::move(members));
  if (!grouped.ok()) return all_bad(grouped.status());
  const int64_t found = static_cast<int64_t>(grouped->size());
  if (shard.samples >= 0 && (cut_short.ok() ? found != shard.samples : found > shard.samples)) {
    return all_bad(absl::DataLossError(absl::StrCat(path, ": holds ", found,
                                                    " samples, its index says ", shard.samples,
                                                    ": the shard changed since it was packed")));
  }
  table->samples.reserve(grouped->size());
  for (const TarSample& tar : *grouped) {
    absl::StatusOr<Sample> sample = ReadSample(path, tar, options.max_images_per_sample);
    if (!sample.ok() && !skip) return sample.status();
    if (sample.ok()) {
      table->samples.push_back(*std::move(sample));
    } else {
      Sample& bad = table->samples.emplace_back();
      bad.key = tar.key;
      bad.offset = tar.members.front().header_offset;
      bad.error = sample.status();
    }
  }
  // A truncated shard: the samples its index lists past the cut.
  if (!cut_short.ok()) {
    const absl::Status missing(
        cut_short.code(), absl::StrCat(cut_short.message(), " (the samples after it are lost)"));
    while (static_cast<int64_t>(table->samples.size()) < shard.samples) {
      Sample& bad = table->samples.emplace_back();
      bad.error = missing;
    }
    // The sample the cut falls in has lost its last members; one whose text went missing is
    // bad already, one whose image did finds out when the image is read.
  }
  return std::shared_ptr<const Table>(std::move(table));
}

std::pair<int, int64_t> ShardDataset::Locate(int64_t index) const {
  const auto next = std::upper_bound(begins_.begin(), begins_.end(), index);
  const int shard = static_cast<int>(next - begins_.begin()) - 1;
  return {shard, index - begins_[shard]};
}

absl::StatusOr<ShardDataset::Found> ShardDataset::Find(int64_t index) const {
  if (index < 0 || index >= size()) {
    return absl::OutOfRangeError(
        absl::StrCat("shards: index ", index, " outside [0, ", size(), ")"));
  }
  const auto [shard, local] = Locate(index);
  std::unique_lock<std::mutex> lock(mutex_);
  // A table another thread is reading is waited for; the mutex is not held while one is read, so
  // threads asking for cached shards go on meanwhile.
  loaded_.wait(lock, [&, shard = shard] { return loading_.count(shard) == 0; });
  auto it = tables_.find(shard);
  if (it != tables_.end()) {
    recent_.remove(shard);
  } else {
    loading_.insert(shard);
    lock.unlock();
    absl::StatusOr<std::shared_ptr<const Table>> read = ReadTable(shards_[shard], options_);
    lock.lock();
    loading_.erase(shard);
    loaded_.notify_all();
    if (!read.ok()) return read.status();
    ++table_reads_;
    cached_samples_ += static_cast<int64_t>((*read)->samples.size());
    it = tables_.emplace(shard, *std::move(read)).first;
    // The least recently used go while over budget; the one just read stays.
    while (cached_samples_ > cache_samples_ && !recent_.empty()) {
      const int oldest = recent_.back();
      recent_.pop_back();
      cached_samples_ -= static_cast<int64_t>(tables_[oldest]->samples.size());
      tables_.erase(oldest);
    }
  }
  recent_.push_front(shard);
  return Found{it->second, &it->second->samples[local], shard};
}

absl::Status ShardDataset::Check(int64_t index) const {
  ASSIGN_OR_RETURN(const Found found, Find(index));
  return found.sample->error;
}

std::vector<int64_t> ShardDataset::ShardSizes() const {
  std::vector<int64_t> sizes;
  for (const ShardInfo& shard : shards_) sizes.push_back(shard.samples);
  return sizes;
}

absl::Status ShardDataset::VerifyShard(int64_t index) const {
  if (index < 0 || index >= size()) return Find(index).status();
  const int s = Locate(index).first;
  const ShardInfo& shard = shards_[s];
  // A shard whose samples are skipped as bad already is not the index's: nothing to verify.
  if (!shard.crc32 || faulted_.count(s)) return absl::OkStatus();
  ASSIGN_OR_RETURN(const uint32_t crc, FileCrc32(shard.path));
  if (crc == *shard.crc32) return absl::OkStatus();
  return absl::DataLossError(absl::StrCat(
      shard.path, ": its CRC-32 is ", FormatCrc32(crc), ", its index says ",
      FormatCrc32(*shard.crc32),
      ": the shard changed since it was packed, so the samples a resumed run reads are not the "
      "ones it was trained on (restore the shard, or pack the data again and start a new run)"));
}

int64_t ShardDataset::cached_shards() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return static_cast<int64_t>(tables_.size());
}

int64_t ShardDataset::table_reads() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return table_reads_;
}

WordCounts ShardDataset::VocabularyCounts() const {
  if (words_) return *words_;
  WordCounts counts;
  for (const ShardInfo& shard : shards_) {
    absl::StatusOr<std::shared_ptr<const Table>> table = ReadTable(shard, options_);
    if (!table.ok()) continue;  // Check reports it when its samples are drawn
    for (const Sample& sample : (*table)->samples) CountWords(WordsOf(sample), counts);
  }
  return counts;
}

std::string ShardDataset::Describe(int64_t index) const {
  absl::StatusOr<Found> found = Find(index);
  if (!found.ok()) {
    if (index < 0 || index >= size()) return absl::StrCat("shards: index ", index);
    const auto [shard, local] = Locate(index);
    return absl::StrCat(shards_[shard].path, ": sample ", local);
  }
  if (found->sample->key.empty()) {
    return absl::StrCat(shards_[found->shard].path, ": sample ", Locate(index).second);
  }
  return absl::StrCat(shards_[found->shard].path, ": ", found->sample->key, " (byte ",
                      found->sample->offset, ")");
}

int64_t ShardDataset::ImageCount(int64_t index) const {
  absl::StatusOr<Found> found = Find(index);
  return found.ok() ? static_cast<int64_t>(found->sample->images.size()) : 0;
}

std::string ShardDataset::Text(int64_t index) const {
  absl::StatusOr<Found> found = Find(index);
  if (!found.ok()) return "";
  const Sample& s = *found->sample;
  return WordsOf(s);
}

std::vector<tokenizer::ChatMessage> ShardDataset::Messages(int64_t index) const {
  absl::StatusOr<Found> found = Find(index);
  if (!found.ok()) return {};
  const Sample& s = *found->sample;
  return s.messages.empty() ? Dataset::Messages(index) : s.messages;
}

absl::StatusOr<Example> ShardDataset::Get(int64_t index) const {
  return FirstImageExample(*this, index, "shards");
}

absl::StatusOr<std::pair<std::string, std::string>> ShardDataset::ImageBytes(int64_t index,
                                                                             int64_t image) const {
  ASSIGN_OR_RETURN(const Found found, Find(index));
  RETURN_IF_ERROR(found.sample->error);
  RETURN_IF_ERROR(CheckImageIndex(*this, index, image, "shards"));
  const TarMember& member = found.sample->images[image];
  const std::string& path = shards_[found.shard].path;
  ASSIGN_OR_RETURN(std::string bytes, ReadTarMember(path, member));
  return std::make_pair(std::move(bytes), absl::StrCat(path, ": ", member.name, " (byte ",
                                                       member.header_offset, ")"));
}

absl::StatusOr<Image> ShardDataset::GetImage(int64_t index, int64_t image) const {
  ASSIGN_OR_RETURN(const auto read, ImageBytes(index, image));
  return LoadSampleImageBytes(read.first, read.second, image_size_, preprocessor_.get());
}

absl::StatusOr<std::vector<Image>> ShardDataset::GetTiles(int64_t index, int64_t image) const {
  if (preprocessor_ == nullptr || !preprocessor_->any_res()) return Dataset::GetTiles(index, image);
  ASSIGN_OR_RETURN(const auto read, ImageBytes(index, image));
  ASSIGN_OR_RETURN(const Image decoded,
                   DecodeImage(read.first, read.second, MaxPixelsFor(image_size_)));
  absl::StatusOr<std::vector<Image>> tiles = PreprocessTiles(*preprocessor_, decoded);
  if (!tiles.ok()) {
    return absl::Status(tiles.status().code(),
                        absl::StrCat(read.second, ": ", tiles.status().message()));
  }
  return tiles;
}

absl::StatusOr<Resolution> ShardDataset::ImageSize(int64_t index, int64_t image) const {
  ASSIGN_OR_RETURN(const Found found, Find(index));
  const int64_t local = Locate(index).second;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (const auto it = found.table->sizes.find({local, image}); it != found.table->sizes.end())
      return it->second;
  }
  ASSIGN_OR_RETURN(const auto read, ImageBytes(index, image));
  ASSIGN_OR_RETURN(const Resolution size, ImageSizeOf(read.first, read.second));
  std::lock_guard<std::mutex> lock(mutex_);
  found.table->sizes.emplace(std::make_pair(local, image), size);
  return size;
}

}  // namespace tandem::data
