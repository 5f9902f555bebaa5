#include "step/batch_plan.h"

#include <algorithm>
#include <cstddef>
#include <numeric>
#include <utility>
#include <vector>

namespace tandem::step {

double LlmCost(int64_t positions, int64_t hidden) {
  const double t = static_cast<double>(positions);
  return t * (12.0 * static_cast<double>(hidden) + t);
}

namespace {

// `mine`'s samples packed into rows of at most `pack` positions: as many rows as first fit
// decreasing needs; then the samples spread over that many rows longest first, each to the row
// with the fewest positions (LPT), so that the rows come out even and the micro-batch's row length
// (its longest row) wastes little. Should a row then exceed `pack`, first fit's rows stand.
std::vector<std::vector<int64_t>> PackRows(const std::vector<int64_t>& mine,
                                           const std::vector<SampleLoad>& loads, int64_t pack) {
  std::vector<int64_t> order = mine;
  std::stable_sort(order.begin(), order.end(),
                   [&](int64_t a, int64_t b) { return loads[a].positions > loads[b].positions; });
  std::vector<std::vector<int64_t>> rows;
  std::vector<int64_t> used;
  for (int64_t sample : order) {
    size_t row = 0;
    while (row < rows.size() && used[row] + loads[sample].positions > pack) ++row;
    if (row == rows.size()) {
      rows.emplace_back();
      used.push_back(0);
    }
    rows[row].push_back(sample);
    used[row] += loads[sample].positions;
  }
  std::vector<std::vector<int64_t>> even(rows.size());
  std::vector<int64_t> filled(rows.size(), 0);
  for (int64_t sample : order) {
    const size_t least =
        static_cast<size_t>(std::min_element(filled.begin(), filled.end()) - filled.begin());
    even[least].push_back(sample);
    filled[least] += loads[sample].positions;
    if (filled[least] > pack) return rows;
  }
  return even;
}

// What `rows` rows cost whose longest holds `longest` positions: a micro-batch of rows x L
// positions, L the longest row (packed: rounded up to a multiple of 8 within pack_tokens, as
// LlmStage::RowsOf does), attention computing every score of each whole row (L x L under a mask,
// where LlmCost counts a causal kernel's half).
double RowsCost(int64_t rows, int64_t longest, const PlanOptions& options) {
  if (rows == 0) return 0;
  int64_t length = std::max<int64_t>(longest, 1);
  if (options.pack_tokens > 0) length = std::min(options.pack_tokens, (length + 7) / 8 * 8);
  const double l = static_cast<double>(length);
  return static_cast<double>(rows) * l * (12.0 * static_cast<double>(options.hidden) + 2 * l);
}

int64_t RowPositions(const std::vector<int64_t>& row, const std::vector<SampleLoad>& loads) {
  int64_t used = 0;
  for (int64_t sample : row) used += loads[sample].positions;
  return used;
}

// What the rows `mine` packs into cost.
double PackedCost(const std::vector<int64_t>& mine, const std::vector<SampleLoad>& loads,
                  const PlanOptions& options) {
  const std::vector<std::vector<int64_t>> rows = PackRows(mine, loads, options.pack_tokens);
  int64_t longest = 0;
  for (const auto& row : rows) longest = std::max(longest, RowPositions(row, loads));
  return RowsCost(static_cast<int64_t>(rows.size()), longest, options);
}

// Improves an assignment of samples to replicas against what their packed rows cost: while moving
// a sample from the costliest replica to one of the kCheapest cheapest, or swapping one of its
// samples with one of theirs, lowers the costlier of the two below the costliest's cost, takes the
// best such change (at most two rounds a replica). LPT on per-sample costs is the start; packing
// makes a replica's cost depend on how its samples fill rows, which no per-sample cost says.
constexpr int kCheapest = 4;

void BalancePackedRows(std::vector<std::vector<int64_t>>& replicas,
                       const std::vector<SampleLoad>& loads, const PlanOptions& options) {
  const int count = static_cast<int>(replicas.size());
  std::vector<double> cost(count);
  for (int r = 0; r < count; ++r) cost[r] = PackedCost(replicas[r], loads, options);
  for (int round = 0; round < 2 * count; ++round) {
    const int top = static_cast<int>(std::max_element(cost.begin(), cost.end()) - cost.begin());
    std::vector<int> others;
    for (int r = 0; r < count; ++r) {
      if (r != top) others.push_back(r);
    }
    std::stable_sort(others.begin(), others.end(), [&](int a, int b) { return cost[a] < cost[b]; });
    if (others.size() > kCheapest) others.resize(kCheapest);
    double best = cost[top];
    std::vector<int64_t> best_top, best_other;
    int best_replica = -1;
    const auto consider = [&](int other, std::vector<int64_t> from, std::vector<int64_t> to) {
      const double a = PackedCost(from, loads, options), b = PackedCost(to, loads, options);
      if (std::max(a, b) < best) {
        best = std::max(a, b);
        best_top = std::move(from), best_other = std::move(to), best_replica = other;
      }
    };
    const std::vector<int64_t>& mine = replicas[top];
    for (int other : others) {
      const std::vector<int64_t>& theirs = replicas[other];
      for (size_t i = 0; i < mine.size(); ++i) {
        std::vector<int64_t> from = mine, to = theirs;
        to.push_back(from[i]);
        from.erase(from.begin() + static_cast<std::ptrdiff_t>(i));
        consider(other, from, to);
        for (size_t j = 0; j < theirs.size(); ++j) {
          std::vector<int64_t> swapped_from = mine, swapped_to = theirs;
          std::swap(swapped_from[i], swapped_to[j]);
          consider(other, std::move(swapped_from), std::move(swapped_to));
        }
      }
    }
    if (best_replica < 0) return;
    replicas[top] = std::move(best_top);
    replicas[best_replica] = std::move(best_other);
    cost[top] = PackedCost(replicas[top], loads, options);
    cost[best_replica] = PackedCost(replicas[best_replica], loads, options);
  }
}

}  // namespace

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
    if (options.pack_tokens > 0 && llm > 1) BalancePackedRows(plan.llm_samples, loads, options);
    for (auto& mine : plan.llm_samples) std::sort(mine.begin(), mine.end());
  } else {
    for (int r = 0; r < llm; ++r) {
      const SampleRange block = OwnedSamples(r, llm, samples);
      for (int64_t s = block.begin; s < block.end; ++s) plan.llm_samples[r].push_back(s);
    }
  }
  // Rows (PackRows), the replica's samples listed row by row; without packing a sample a row.
  plan.llm_row_ends.resize(llm);
  for (int r = 0; r < llm; ++r) {
    std::vector<int64_t>& mine = plan.llm_samples[r];
    std::vector<std::vector<int64_t>> rows;
    if (options.pack_tokens > 0) {
      rows = PackRows(mine, loads, options.pack_tokens);
    } else {
      for (int64_t sample : mine) rows.push_back({sample});
    }
    mine.clear();
    int64_t longest = 0;
    for (const auto& row : rows) {
      mine.insert(mine.end(), row.begin(), row.end());
      plan.llm_row_ends[r].push_back(static_cast<int64_t>(mine.size()));
      longest = std::max(longest, RowPositions(row, loads));
    }
    plan.llm_costs.push_back(RowsCost(static_cast<int64_t>(rows.size()), longest, options));
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
