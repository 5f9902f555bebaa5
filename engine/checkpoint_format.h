// The files of an engine checkpoint directory (NOTE [Re-partitioning on load] in checkpoint.cc):
// the pieces Engine::SaveCheckpoint / LoadCheckpoint and code that reads a checkpoint as the whole
// model (step/tensor_parallel_checkpoint.h) share, so the format is written down once. LibTorch
// header (through safetensors.h).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/safetensors.h"

namespace tandem::engine {

// Written last by rank 0: {"global_steps": S, "world_size": W, "zero_stage": Z}.
inline constexpr char kCheckpointCompleteMarker[] = "complete";
// The frozen parameters, whole (NOTE [Frozen parameters] in frozen.cc).
inline constexpr char kCheckpointFrozenFile[] = "frozen.safetensors";

// "rank_<rank>_of_<world>.safetensors"
std::string CheckpointShardName(int rank, int world);

// A metadata value of a shard; nullptr when absent.
const std::string* CheckpointMeta(const SafetensorsHeader& shard, const std::string& key);

// The world size of the save the "complete" marker `marker` closed.
absl::StatusOr<int> SavedWorldSize(const std::string& marker);

// A shard's "unit_elements": the real element count of each unit, which add up to
// `num_parameters`. InvalidArgument naming the shard otherwise.
absl::StatusOr<std::vector<int64_t>> ParseUnitElements(const SafetensorsHeader& shard,
                                                       int64_t num_parameters);

// Real parameter elements [global, global + length) of the flattened model that sit at
// [local, local + length) of a domain tensor.
struct DomainSegment {
  int64_t global = 0;
  int64_t local = 0;
  int64_t length = 0;
};

// The real elements of `rank`'s domain in a group of `world` ranks at ZeRO `stage` whose units hold
// `unit_elements` each (Engine::DomainStart / DomainLength and NOTE [Units]); `domain_elements`
// receives the domain's length, padding included.
std::vector<DomainSegment> DomainSegments(const std::vector<int64_t>& unit_elements, int world,
                                          int stage, int rank, int64_t* domain_elements);

}  // namespace tandem::engine
