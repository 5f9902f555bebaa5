// A dataset of tar shards in WebDataset's layout (data/tar_shard.h): sample i is the i-th sample of
// the shards in order, each a key with a "json" member (its text) and image members.
//
//   KEY.json    {"conversations": [...]} (LLaVA) or {"messages": [...]} (ShareGPT), as in
//               conversation files (data/conversation.h), or {"caption": "..."} / {"text": "..."}
//               for a caption of one image. Image file names in it are not read: the sample's
//               image members are its images.
//   KEY.png     one image (also jpg, jpeg), or KEY.0.png, KEY.1.png, ... several, in that order,
//               one for each "<image>" mark.
// Other members (KEY.txt, KEY.cls, ...) are ignored.
//
// Shards are named by paths or brace ranges, as WebDataset writes them:
// "shards/train-{000000..000099}.tar" is 100 shards (ExpandShardPattern), or by the directory
// `tandem data pack` wrote (data/shard_pack.h), whose index.json lists them with their sample
// counts, sizes, checksums and the texts' word counts.
//
// No rank holds the whole data set. Opening reads the index (a directory) or scans each shard's
// headers once to count its samples (paths and ranges); either way only each shard's count stays.
// A shard's table (its members' offsets, its texts parsed) is read when one of its samples is
// first asked for and kept in a cache of the most recently used shards, at most about two shuffle
// windows' worth (data/sampler.h): Options::shuffle_buffer, so memory is bounded by the window
// and the shard size, not by the data set. Images are read from their shard when asked for, each
// rank reading only the images it encodes.
//
// Errors name the shard, the key and the byte offset of the member: a sample without its text, a
// JSON error, marks that differ from the images, more images than data.max_images_per_sample, a
// shard whose size or sample count is no longer the index's. They are reported by Check (and by
// Open for shards without an index, whose scan reads every table once); with
// Options::skip_bad_samples, Check reports them for the bad samples alone.
//
// Thread-safety: all methods may be called from several threads; the cache is behind a mutex,
// which is not held while a table is read, so readers of cached shards do not wait for it.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "data/conversation.h"
#include "data/dataset.h"
#include "data/shard_manifest.h"
#include "data/tar_shard.h"

namespace tandem::data {

// The shard paths a pattern names: itself, or one path a number of each "{FIRST..LAST}" range
// (digits; the width of FIRST is kept, as in "{000000..000099}"). InvalidArgument naming the
// pattern for an unclosed brace, a range whose ends are not numbers or LAST < FIRST.
absl::StatusOr<std::vector<std::string>> ExpandShardPattern(const std::string& pattern);

struct ShardDatasetOptions {
  int64_t max_images_per_sample = 1;  // data.max_images_per_sample
  int64_t shuffle_buffer = 10000;     // data.shards.shuffle_buffer: sizes the cache
  // data.on_bad_sample "skip": a sample that cannot be read is kept as a bad one, which Check
  // reports, instead of failing its whole shard (a truncated tar keeps the samples before the cut,
  // a missing or changed shard of an index is its listed count of bad samples, a missing shard
  // without an index has none).
  bool skip_bad_samples = false;
};

class ShardDataset final : public Dataset {
 public:
  using Options = ShardDatasetOptions;

  static absl::StatusOr<std::unique_ptr<ShardDataset>> Open(
      const std::vector<std::string>& patterns, int64_t image_size,
      std::shared_ptr<const ImagePreprocessor> preprocessor = nullptr, Options options = {});

  int64_t size() const override { return begins_.back(); }
  absl::Status Check(int64_t index) const override;
  std::vector<int64_t> ShardSizes() const override;
  std::vector<ShardInfo> Shards() const override { return shards_; }
  absl::Status VerifyShard(int64_t index) const override;

  absl::StatusOr<Example> Get(int64_t index) const override;
  int64_t ImageCount(int64_t index) const override;
  absl::StatusOr<Image> GetImage(int64_t index, int64_t image) const override;
  absl::StatusOr<std::vector<Image>> GetTiles(int64_t index, int64_t image) const override;
  absl::StatusOr<Resolution> ImageSize(int64_t index, int64_t image) const override;
  std::string Text(int64_t index) const override;
  std::vector<tokenizer::ChatMessage> Messages(int64_t index) const override;
  // The index's word counts when it has them; otherwise counted table by table (not cached).
  WordCounts VocabularyCounts() const override;
  // "shards/train-000003.tar: 000012 (byte 5120)"; "shards/train-000003.tar: sample 7" when the
  // shard's table cannot be read.
  std::string Describe(int64_t index) const override;

  // Shard tables held now, and read so far (for tests and the bench).
  int64_t cached_shards() const;
  int64_t table_reads() const;

 private:
  struct Sample {
    std::string key;
    int64_t offset = 0;             // of its text member's header
    std::vector<TarMember> images;  // in mark order
    std::string caption;            // a caption sample's text; empty for a conversation
    std::vector<tokenizer::ChatMessage> messages;  // a conversation's
    absl::Status error;  // why it cannot be read (Options::skip_bad_samples); OK for a good one
  };
  struct Table {
    std::vector<Sample> samples;
    mutable std::map<std::pair<int64_t, int64_t>, Resolution> sizes;  // by (sample, image)
  };
  // One sample with the table that holds it alive.
  struct Found {
    std::shared_ptr<const Table> table;
    const Sample* sample = nullptr;
    int shard = 0;
  };

  ShardDataset(std::vector<ShardInfo> shards, int64_t image_size,
               std::shared_ptr<const ImagePreprocessor> preprocessor, Options options,
               std::optional<WordCounts> words);

  // The sample's text as Text gives it: its caption, or its conversation's words.
  static std::string WordsOf(const Sample& sample);
  // Reads and checks shard `shard`'s table.
  static absl::StatusOr<std::shared_ptr<const Table>> ReadTable(const ShardInfo& shard,
                                                                const Options& options);
  // One sample of shard `path`: its text read and parsed, its images in mark order.
  static absl::StatusOr<Sample> ReadSample(const std::string& path, const TarSample& tar,
                                           int64_t max_images);
  // The shard holding `index` and its place in it. REQUIRES: 0 <= index < size().
  std::pair<int, int64_t> Locate(int64_t index) const;
  absl::StatusOr<Found> Find(int64_t index) const;
  // Image `image`'s bytes and its name for errors ("train-000003.tar: 000012.0.png").
  absl::StatusOr<std::pair<std::string, std::string>> ImageBytes(int64_t index,
                                                                 int64_t image) const;

  std::vector<ShardInfo> shards_;
  std::vector<int64_t> begins_;  // first index of each shard, then size()
  int64_t image_size_;
  std::shared_ptr<const ImagePreprocessor> preprocessor_;
  Options options_;
  int64_t cache_samples_;  // the cache's budget
  std::optional<WordCounts> words_;
  std::set<int> faulted_;  // Options::skip_bad_samples: shards missing or unlike their index

  mutable std::mutex mutex_;
  mutable std::condition_variable loaded_;  // a table being read is in tables_ now, or failed
  mutable std::set<int> loading_;           // shards whose tables a thread is reading
  mutable std::list<int> recent_;           // shards cached, most recently used first
  mutable std::map<int, std::shared_ptr<const Table>> tables_;
  mutable int64_t cached_samples_ = 0;
  mutable int64_t table_reads_ = 0;
};

}  // namespace tandem::data
