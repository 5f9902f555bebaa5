// How an engine lays its trainable parameters out in flat buffers and splits them across the group.
//
// NOTE [Units]
// Parameters, in the module's named_parameters() order, are grouped into units: consecutive
// parameters up to reduce_bucket_size elements, and at ZeRO-3 each BlockModule's parameters as one
// unit of their own (gathered together just in time for the block). A unit is padded to a multiple
// of the world size and every rank owns the same-sized chunk of every unit: rank r owns [r*shard,
// (r+1)*shard) of it. A unit is the granularity of everything collective: one gradient reduction
// (all-reduce at stages 0-1, reduce-scatter at 2-3), one parameter all-gather after the step, one
// just-in-time gather at stage 3. Partitions are uneven-proof: padding elements are zero and are
// never read back.
//
// Coordinates: "full" offsets index the concatenation of all padded units; "shard" offsets index
// the concatenation of this rank's chunks. Thread-compatible (immutable after Build).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace tandem::engine {

struct ParamSpec {
  std::string name;
  std::vector<int64_t> shape;
  int64_t numel = 0;
  int group = -1;  // BlockModule id at ZeRO-3 (its parameters form one unit), -1 otherwise
};

struct ParamSlot {
  int unit = 0;
  int64_t offset = 0;  // element offset inside the unit
};

struct Unit {
  int first_param = 0;  // [first_param, end_param) in parameter order
  int end_param = 0;
  int group = -1;
  int64_t numel = 0;         // real elements
  int64_t padded = 0;        // numel rounded up to a multiple of the world size
  int64_t shard = 0;         // padded / world size
  int64_t full_offset = 0;   // start in full coordinates
  int64_t shard_offset = 0;  // start of this rank's chunk in shard coordinates
};

class Layout {
 public:
  // REQUIRES: world_size >= 1, bucket_elements >= 1, numel > 0 for each parameter. No parameters
  // give a layout of no units (a model whose parameters are all frozen).
  // Parameters of one group must be consecutive (InvalidArgument naming the parameter otherwise).
  static absl::StatusOr<Layout> Build(std::vector<ParamSpec> params, int world_size,
                                      int64_t bucket_elements);

  const std::vector<ParamSpec>& params() const { return params_; }
  const std::vector<ParamSlot>& slots() const { return slots_; }
  const std::vector<Unit>& units() const { return units_; }
  int world_size() const { return world_size_; }
  int64_t num_elements() const { return num_elements_; }  // real, all parameters
  int64_t full_elements() const { return full_elements_; }
  int64_t shard_elements() const { return shard_elements_; }

 private:
  std::vector<ParamSpec> params_;
  std::vector<ParamSlot> slots_;
  std::vector<Unit> units_;
  int world_size_ = 1;
  int64_t num_elements_ = 0;
  int64_t full_elements_ = 0;
  int64_t shard_elements_ = 0;
};

}  // namespace tandem::engine
