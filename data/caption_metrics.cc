#include "data/caption_metrics.h"

#include <algorithm>

namespace tandem::data {
double CaptionScore::exact_match() const {
  return samples == 0 ? 0.0 : static_cast<double>(exact) / static_cast<double>(samples);
}

double CaptionScore::token_accuracy() const {
  return tokens_total == 0
             ? 0.0
             : static_cast<double>(tokens_correct) / static_cast<double>(tokens_total);
}

CaptionScore& CaptionScore::operator+=(const CaptionScore& other) {
  samples += other.samples;
  exact += other.exact;
  tokens_correct += other.tokens_correct;
  tokens_total += other.tokens_total;
  return *this;
}

void Accumulate(const std::vector<int64_t>& g, const std::vector<int64_t>& r, CaptionScore* score) {
  score->samples += 1;
  score->exact += g == r ? 1 : 0;
  score->tokens_total += static_cast<int64_t>(r.size()) + 1;
  const size_t common = std::min(g.size(), r.size());
  for (size_t i = 0; i < common; ++i) score->tokens_correct += g[i] == r[i] ? 1 : 0;
  score->tokens_correct += g.size() == r.size() ? 1 : 0;
}

}  // namespace tandem::data
