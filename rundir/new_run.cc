#include "rundir/new_run.h"

#include <filesystem>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace tandem::rundir {

absl::Status CheckRunDirIsNew(const std::string& run_dir) {
  std::error_code ec;
  if (std::filesystem::exists(run_dir, ec) && !std::filesystem::is_empty(run_dir, ec)) {
    return absl::AlreadyExistsError(absl::StrCat(
        "run directory ", run_dir, " already exists and is not empty; choose another --run-dir"));
  }
  return absl::OkStatus();
}

absl::StatusOr<CheckpointInfo> ReadResumePoint(const std::string& path, int64_t steps) {
  ASSIGN_OR_RETURN(CheckpointInfo checkpoint, ReadCheckpoint(path));
  if (checkpoint.step >= steps) {
    return absl::InvalidArgumentError(absl::StrCat(path, " is at step ", checkpoint.step,
                                                   " and schedule.steps is ", steps,
                                                   ": nothing is left to train"));
  }
  return checkpoint;
}

}  // namespace tandem::rundir
