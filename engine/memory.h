// Memory accounting of an engine's model states, and the process's peak memory.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace tandem::engine {

// Bytes of model state one rank holds. Padding of uneven partitions is counted (it is allocated).
struct MemoryReport {
  int rank = 0;
  int64_t num_parameters = 0;   // trainable parameters of the whole model (not per rank)
  int64_t param_bytes = 0;      // the weights the model computes with (resident + owned shards)
  int64_t grad_bytes = 0;       // accumulated, reduced gradients
  int64_t master_bytes = 0;     // separate fp32 master weights (0 when the param is the master)
  int64_t optimizer_bytes = 0;  // Adam moments (+ Kahan compensation)
  // Reduction buckets: the most bytes they held at once since the engine was created (NOTE
  // [Buckets] in engine.h; 0 when gradients reduce in place). Transient, so not in
  // model_state_bytes().
  int64_t bucket_bytes = 0;
  // Frozen parameters (requires_grad false): their count and the bytes of their weights on this
  // rank. Not model state: they have no gradient, master or moments, and are not in the total.
  int64_t frozen_parameters = 0;
  int64_t frozen_bytes = 0;
  int64_t peak_bytes = 0;   // process peak: CUDA allocator peak on GPU, peak RSS (VmHWM) on CPU
  std::string peak_source;  // "cuda" or "rss"

  int64_t model_state_bytes() const {
    return param_bytes + grad_bytes + master_bytes + optimizer_bytes;
  }
  // Model-state bytes per trainable parameter of the model, on this rank.
  double bytes_per_parameter() const {
    return num_parameters == 0 ? 0.0 : static_cast<double>(model_state_bytes()) / num_parameters;
  }
};

// Peak and current resident set size of this process, from /proc/self/status (0 if unavailable).
int64_t PeakResidentBytes();
int64_t CurrentResidentBytes();

// A fixed-width table, one row per report: rank, params, grads, master, optimizer, total, B/param,
// peak.
std::string FormatMemoryTable(const std::vector<MemoryReport>& reports);

}  // namespace tandem::engine
