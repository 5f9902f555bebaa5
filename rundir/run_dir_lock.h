// An exclusive lock on a run directory while a job writes it: <run_dir>/.lock, held with flock for
// the lock's lifetime, so that two jobs (or two coordinators, or a coordinator and `tandem run
// --colocated`) never resume from each other's checkpoints or overwrite each other's files. The
// lock ends with the process, however it ends; the empty file stays.
//
// Thread-compatible; movable, not copyable (common/file_lock.h).
#pragma once

#include <string>
#include <utility>

#include "absl/status/statusor.h"
#include "common/file_lock.h"

namespace tandem::rundir {

class RunDirLock {
 public:
  // Takes the lock without waiting; `holder` (a job's id and name) is written into the lock file
  // for whoever tries next. FailedPrecondition naming the directory and the holder when another
  // has it; the errno's status naming the file when it cannot be opened (a symlink is refused).
  static absl::StatusOr<RunDirLock> Acquire(const std::string& run_dir,
                                            const std::string& holder = "a job");

  // Removes what writers that died left in the locked directory: the temporary files of
  // WriteFileAtomically ("<name>.tmp.<pid>"), at any depth. Returns how many. Errors name the file.
  absl::StatusOr<int> RemoveLeftoverTempFiles() const;

 private:
  RunDirLock(FileLock lock, std::string run_dir)
      : lock_(std::move(lock)), run_dir_(std::move(run_dir)) {}
  FileLock lock_;
  std::string run_dir_;
};

}  // namespace tandem::rundir
