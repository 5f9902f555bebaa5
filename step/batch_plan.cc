#include "step/batch_plan.h"

#include <algorithm>
#include <numeric>

namespace tandem::step {

double LlmCost(int64_t positions, int64_t hidden) {
  const double t = static_cast<double>(positions);
  return t * (12.0 * static_cast<double>(hidden) + t);
}

MicroBatchPlan PlanMicroBatch(const std::vector<SampleLoad>& loads, const PlanOptions& options) {
  const int64_t samples = static_cast<int64_t>(loads.size());
  const int llm = options.llm_replicas;
  const int vision = options.vision_replicas;
  MicroBatchPlan plan;
  plan.llm_samples.resize(llm);
  if (options.balance) {
    std::vector<int64_t> order(samples);
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
      return LlmCost(loads[a].positions, options.hidden) >
             LlmCost(loads[b].positions, options.hidden);
    });
    std::vector<double> load(llm, 0.0);
    for (int64_t sample : order) {
      const int least = static_cast<int>(std::min_element(load.begin(), load.end()) - load.begin());
      load[least] += LlmCost(loads[sample].positions, options.hidden);
      plan.llm_samples[least].push_back(sample);
    }
    for (auto& mine : plan.llm_samples) std::sort(mine.begin(), mine.end());
  } else {
    for (int r = 0; r < llm; ++r) {
      const SampleRange block = OwnedSamples(r, llm, samples);
      for (int64_t s = block.begin; s < block.end; ++s) plan.llm_samples[r].push_back(s);
    }
  }
  // Rows: as many as first fit decreasing needs within each replica; then the samples spread over
  // that many rows longest first, each to the row with the fewest positions (LPT), so that the rows
  // come out even and a micro-batch's row length (its longest row) wastes little. Should a row then
  // exceed pack_tokens, first fit's rows stand. The replica's samples are listed row by row.
  plan.llm_row_ends.resize(llm);
  for (int r = 0; r < llm; ++r) {
    std::vector<int64_t>& mine = plan.llm_samples[r];
    if (options.pack_tokens <= 0) {
      for (size_t i = 1; i <= mine.size(); ++i)
        plan.llm_row_ends[r].push_back(static_cast<int64_t>(i));
      continue;
    }
    std::vector<int64_t> order = mine;
    std::stable_sort(order.begin(), order.end(),
                     [&](int64_t a, int64_t b) { return loads[a].positions > loads[b].positions; });
    std::vector<std::vector<int64_t>> rows;
    std::vector<int64_t> used;
    for (int64_t sample : order) {
      size_t row = 0;
      while (row < rows.size() && used[row] + loads[sample].positions > options.pack_tokens) ++row;
      if (row == rows.size()) {
        rows.emplace_back();
        used.push_back(0);
      }
      rows[row].push_back(sample);
      used[row] += loads[sample].positions;
    }
    std::vector<std::vector<int64_t>> even(rows.size());
    std::vector<int64_t> filled(rows.size(), 0);
    bool fits = true;
    for (int64_t sample : order) {
      const size_t least =
          static_cast<size_t>(std::min_element(filled.begin(), filled.end()) - filled.begin());
      even[least].push_back(sample);
      filled[least] += loads[sample].positions;
      fits = fits && filled[least] <= options.pack_tokens;
    }
    if (fits) rows = std::move(even);
    mine.clear();
    for (const auto& row : rows) {
      mine.insert(mine.end(), row.begin(), row.end());
      plan.llm_row_ends[r].push_back(static_cast<int64_t>(mine.size()));
    }
  }
  // The exchange order, and where each sample's images begin in it.
  std::vector<int64_t> first(samples, 0);
  for (int r = 0; r < llm; ++r) {
    const int64_t begin = static_cast<int64_t>(plan.images.size());
    for (int64_t sample : plan.llm_samples[r]) {
      first[sample] = static_cast<int64_t>(plan.images.size());
      for (int64_t k = 0; k < loads[sample].images; ++k) plan.images.push_back({sample, k});
    }
    plan.llm_images.push_back({begin, static_cast<int64_t>(plan.images.size())});
  }
  const int64_t total = static_cast<int64_t>(plan.images.size());
  for (int v = 0; v < vision; ++v) {
    // Without balance or packing the LLM blocks are contiguous, so the exchange order is sample
    // order and a sample block's images are one block; otherwise split by count.
    if (options.balance || options.pack_tokens > 0) {
      plan.vision_images.push_back(OwnedSamples(v, vision, total));
      continue;
    }
    const SampleRange block = OwnedSamples(v, vision, samples);
    const int64_t begin = block.begin < samples ? first[block.begin] : total;
    const int64_t end = block.end < samples ? first[block.end] : total;
    plan.vision_images.push_back({begin, end});
  }
  return plan;
}

std::vector<std::pair<int, SampleRange>> ImageOverlaps(SampleRange mine,
                                                       const std::vector<SampleRange>& peers) {
  std::vector<std::pair<int, SampleRange>> out;
  for (size_t p = 0; p < peers.size(); ++p) {
    const SampleRange overlap = Intersect(mine, peers[p]);
    if (!overlap.empty()) out.emplace_back(static_cast<int>(p), overlap);
  }
  return out;
}

}  // namespace tandem::step
