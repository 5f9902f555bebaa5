// A run's checkpoints as directories: <run_dir>/checkpoints/step-NNNNNN/ holds vision/ and llm/
// (each group's engine shards with their own `complete` marker), tokenizer.json, and a `complete`
// marker of its own, written last, once every rank of both groups saved: a checkpoint counts only
// then. The marker is JSON: {"step": 20, "vision_actors": 2, "llm_actors": 1}. A `damaged` file
// beside it says the checkpoint could not be loaded, and why. Torch-free.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace tandem::rundir {

struct CheckpointInfo {
  std::string directory;  // .../checkpoints/step-NNNNNN
  int64_t step = 0;
  int64_t vision_actors = 0;  // the group sizes that wrote it
  int64_t llm_actors = 0;
};

// "step-000020"
std::string CheckpointName(int64_t step);

// Writes <info.directory>/complete atomically.
absl::Status MarkCheckpointComplete(const CheckpointInfo& info);

// Reads a checkpoint directory's marker. FailedPrecondition naming the directory when it has none
// (an interrupted save) or is not a directory; InvalidArgument naming the file for a bad marker.
absl::StatusOr<CheckpointInfo> ReadCheckpoint(const std::string& directory);

// The complete checkpoint of <run_dir>/checkpoints with the highest step at or below `at_most`;
// nullopt when there is none. Incomplete, unreadable and damaged ones are skipped.
std::optional<CheckpointInfo> LatestCheckpoint(const std::string& run_dir,
                                               int64_t at_most = INT64_MAX);

// Writes <directory>/damaged holding `reason`: a complete checkpoint its actors could not load (a
// file truncated or changed since it was written). LatestCheckpoint passes over it from then on;
// nothing of it is removed.
absl::Status MarkCheckpointDamaged(const std::string& directory, const std::string& reason);

}  // namespace tandem::rundir
