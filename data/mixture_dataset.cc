#include "data/mixture_dataset.h"

#include <algorithm>
#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "data/sampler.h"

namespace tandem::data {

std::vector<std::string> MixtureNames(const DataConfig& config) {
  std::vector<std::string> names;
  for (const MixtureSource& source : config.mixture) names.push_back(source.name);
  return names;
}

std::function<std::vector<int64_t>(int64_t)> MixtureCounter(const DataConfig& config) {
  if (config.mixture.empty()) return nullptr;
  struct State {
    std::vector<double> weights;
    int64_t drawn = 0;
    std::vector<int64_t> counts;
  };
  auto state = std::make_shared<State>();
  for (const MixtureSource& source : config.mixture) state->weights.push_back(source.weight);
  state->counts.assign(state->weights.size(), 0);
  return [state](int64_t draws) {
    if (draws < state->drawn) {
      state->drawn = 0;
      state->counts.assign(state->weights.size(), 0);
    }
    for (; state->drawn < draws; ++state->drawn)
      ++state->counts[NextMixtureSource(state->weights, state->counts, state->drawn)];
    return state->counts;
  };
}

MixtureDataset::MixtureDataset(std::vector<Source> sources) : sources_(std::move(sources)) {
  begins_.assign(1, 0);
  for (const Source& source : sources_) begins_.push_back(begins_.back() + source.dataset->size());
}

std::pair<const MixtureDataset::Source*, int64_t> MixtureDataset::Locate(int64_t index) const {
  const auto next = std::upper_bound(begins_.begin(), begins_.end(), index);
  const size_t s = static_cast<size_t>(next - begins_.begin()) - 1;
  return {&sources_[s], index - begins_[s]};
}

absl::Status MixtureDataset::Named(const Source& source, const absl::Status& status) const {
  if (status.ok()) return status;
  return absl::Status(status.code(), absl::StrCat(source.name, ": ", status.message()));
}

absl::Status MixtureDataset::Check(int64_t index) const {
  if (index < 0 || index >= size()) {
    return absl::OutOfRangeError(
        absl::StrCat("mixture: index ", index, " outside [0, ", size(), ")"));
  }
  const auto [source, local] = Locate(index);
  return Named(*source, source->dataset->Check(local));
}

std::vector<int64_t> MixtureDataset::ShardSizes() const {
  std::vector<int64_t> sizes;
  for (const Source& source : sources_) {
    const std::vector<int64_t> own = source.dataset->ShardSizes();
    sizes.insert(sizes.end(), own.begin(), own.end());
  }
  return sizes;
}

std::vector<ShardInfo> MixtureDataset::Shards() const {
  std::vector<ShardInfo> shards;
  for (const Source& source : sources_) {
    const std::vector<ShardInfo> own = source.dataset->Shards();
    shards.insert(shards.end(), own.begin(), own.end());
  }
  return shards;
}

absl::Status MixtureDataset::VerifyShard(int64_t index) const {
  const auto [source, local] = Locate(index);
  return Named(*source, source->dataset->VerifyShard(local));
}

template <typename Call>
auto MixtureDataset::Forward(int64_t index, const Call& call) const
    -> decltype(call(std::declval<const Dataset&>(), int64_t{0})) {
  RETURN_IF_ERROR(Check(index));
  const auto [source, local] = Locate(index);
  auto result = call(*source->dataset, local);
  if (!result.ok()) return Named(*source, result.status());
  return result;
}

absl::StatusOr<Example> MixtureDataset::Get(int64_t index) const {
  return Forward(index, [](const Dataset& d, int64_t i) { return d.Get(i); });
}

int64_t MixtureDataset::ImageCount(int64_t index) const {
  const auto [source, local] = Locate(index);
  return source->dataset->ImageCount(local);
}

absl::StatusOr<Image> MixtureDataset::GetImage(int64_t index, int64_t image) const {
  return Forward(index, [&](const Dataset& d, int64_t i) { return d.GetImage(i, image); });
}

absl::StatusOr<std::vector<Image>> MixtureDataset::GetTiles(int64_t index, int64_t image) const {
  return Forward(index, [&](const Dataset& d, int64_t i) { return d.GetTiles(i, image); });
}

absl::StatusOr<Resolution> MixtureDataset::ImageSize(int64_t index, int64_t image) const {
  return Forward(index, [&](const Dataset& d, int64_t i) { return d.ImageSize(i, image); });
}

std::string MixtureDataset::Text(int64_t index) const {
  const auto [source, local] = Locate(index);
  return source->dataset->Text(local);
}

std::vector<tokenizer::ChatMessage> MixtureDataset::Messages(int64_t index) const {
  const auto [source, local] = Locate(index);
  return source->dataset->Messages(local);
}

std::vector<std::string> MixtureDataset::VocabularyTexts() const {
  std::vector<std::string> texts;
  for (const Source& source : sources_) {
    std::vector<std::string> own = source.dataset->VocabularyTexts();
    texts.insert(texts.end(), std::make_move_iterator(own.begin()),
                 std::make_move_iterator(own.end()));
  }
  return texts;
}

WordCounts MixtureDataset::VocabularyCounts() const {
  WordCounts counts;
  for (const Source& source : sources_) {
    for (const auto& [word, count] : source.dataset->VocabularyCounts()) counts[word] += count;
  }
  return counts;
}

std::string MixtureDataset::Describe(int64_t index) const {
  if (index < 0 || index >= size()) return absl::StrCat("mixture: index ", index);
  const auto [source, local] = Locate(index);
  return absl::StrCat(source->name, ": ", source->dataset->Describe(local));
}

}  // namespace tandem::data
