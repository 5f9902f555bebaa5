// Several data sets as one (data.mixture): the sources' samples one source after another, sample i
// of source s following all the samples of the sources before it. Which source each draw takes is
// the sampler's business (data/sampler.h: SampleOrder::mixture, MixtureCounts); this class only
// maps indices, so every Dataset call goes to the source that holds the sample, and errors and
// descriptions are that source's, prefixed with its name ("captions: train.jsonl:12
// (images/cat.png)").
//
// Thread-safety: as its sources'.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "data/data_config.h"
#include "data/dataset.h"

namespace tandem::data {

// A mixture's source names, in order (empty for one data set), and a function giving each
// source's samples after n draws (MixtureCounts, carried on from its last answer, so that asking
// step after step costs the draws between them); null for one data set.
std::vector<std::string> MixtureNames(const DataConfig& config);
std::function<std::vector<int64_t>(int64_t)> MixtureCounter(const DataConfig& config);

class MixtureDataset final : public Dataset {
 public:
  struct Source {
    std::string name;
    std::unique_ptr<Dataset> dataset;  // never null
  };

  // REQUIRES: at least one source, none null.
  explicit MixtureDataset(std::vector<Source> sources);

  const std::vector<Source>& sources() const { return sources_; }

  int64_t size() const override { return begins_.back(); }
  absl::Status Check(int64_t index) const override;
  std::vector<int64_t> ShardSizes() const override;
  std::vector<ShardInfo> Shards() const override;
  absl::Status VerifyShard(int64_t index) const override;
  absl::StatusOr<Example> Get(int64_t index) const override;
  int64_t ImageCount(int64_t index) const override;
  absl::StatusOr<Image> GetImage(int64_t index, int64_t image) const override;
  absl::StatusOr<std::vector<Image>> GetTiles(int64_t index, int64_t image) const override;
  absl::StatusOr<Resolution> ImageSize(int64_t index, int64_t image) const override;
  std::string Text(int64_t index) const override;
  std::vector<tokenizer::ChatMessage> Messages(int64_t index) const override;
  std::vector<std::string> VocabularyTexts() const override;
  WordCounts VocabularyCounts() const override;
  std::string Describe(int64_t index) const override;

 private:
  // The source holding `index` and the index within it. REQUIRES: 0 <= index < size().
  std::pair<const Source*, int64_t> Locate(int64_t index) const;
  // `status` with the source's name ahead of its message.
  absl::Status Named(const Source& source, const absl::Status& status) const;
  // call(source's dataset, index within it) for the source holding `index`, after Check; its
  // error named.
  template <typename Call>
  auto Forward(int64_t index, const Call& call) const
      -> decltype(call(std::declval<const Dataset&>(), int64_t{0}));

  std::vector<Source> sources_;
  std::vector<int64_t> begins_;  // first index of each source, then size()
};

}  // namespace tandem::data
