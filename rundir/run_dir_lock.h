// An exclusive lock on a run directory while a job writes it: <run_dir>/.lock, held with flock for
// the lock's lifetime, so that two jobs (or two coordinators, or a coordinator and `tandem run
// --colocated`) never resume from each other's checkpoints or overwrite each other's files. The
// lock ends with the process, however it ends; the empty file stays.
//
// Thread-compatible; movable, not copyable.
#pragma once

#include <string>

#include "absl/status/statusor.h"

namespace tandem::rundir {

class RunDirLock {
 public:
  // Takes the lock without waiting. FailedPrecondition naming the directory when another holder
  // has it; the errno's status naming the file when it cannot be opened (a symlink is refused).
  static absl::StatusOr<RunDirLock> Acquire(const std::string& run_dir);

  RunDirLock(RunDirLock&& other) noexcept;
  RunDirLock& operator=(RunDirLock&& other) noexcept;
  RunDirLock(const RunDirLock&) = delete;
  RunDirLock& operator=(const RunDirLock&) = delete;
  ~RunDirLock();

 private:
  explicit RunDirLock(int fd) : fd_(fd) {}
  int fd_ = -1;
};

}  // namespace tandem::rundir
