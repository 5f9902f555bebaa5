// What starting a run asks of its run directory and of the checkpoint it resumes, for every way a
// run starts: `tandem run` (embedded), `tandem run --colocated` and the coordinator's submit.
// Torch-free.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "rundir/checkpoint_dir.h"

namespace tandem::rundir {

// OK when `run_dir` does not exist or is an empty directory. Otherwise AlreadyExists "run
// directory <run_dir> already exists and is not empty; choose another --run-dir": nothing of an
// earlier run is overwritten.
absl::Status CheckRunDirIsNew(const std::string& run_dir);

// The complete checkpoint at `path` (a spec's resume_from), when it leaves steps to train.
// ReadCheckpoint's errors, or InvalidArgument "<path> is at step N and schedule.steps is S:
// nothing is left to train".
absl::StatusOr<CheckpointInfo> ReadResumePoint(const std::string& path, int64_t steps);

}  // namespace tandem::rundir
