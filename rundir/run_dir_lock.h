// An exclusive lock on a run directory while a job writes it: <run_dir>/.lock, held with flock for
// the lock's lifetime, so that two jobs (or two coordinators, or a coordinator and `tandem run
// --colocated`) never resume from each other's checkpoints or overwrite each other's files. The
// lock ends with the process, however it ends; the empty file stays.
//
// Thread-compatible; movable, not copyable.
#pragma once

#include <string>
#include <utility>

#include "absl/status/statusor.h"

namespace tandem::rundir {

class RunDirLock {
 public:
  // Takes the lock without waiting. FailedPrecondition naming the directory when another holder
  // has it; the errno's status naming the file when it cannot be opened (a symlink is refused).
  static absl::StatusOr<RunDirLock> Acquire(const std::string& run_dir);

  // Removes what writers that died left in the locked directory: the temporary files of
  // WriteFileAtomically ("<name>.tmp.<pid>"), at any depth. Returns how many. Errors name the file.
  absl::StatusOr<int> RemoveLeftoverTempFiles() const;

  RunDirLock(RunDirLock&& other) noexcept;
  RunDirLock& operator=(RunDirLock&& other) noexcept;
  RunDirLock(const RunDirLock&) = delete;
  RunDirLock& operator=(const RunDirLock&) = delete;
  ~RunDirLock();

 private:
  RunDirLock(int fd, std::string run_dir) : fd_(fd), run_dir_(std::move(run_dir)) {}
  int fd_ = -1;
  std::string run_dir_;
};

}  // namespace tandem::rundir
