// An exclusive, advisory lock on a file, held with flock for the lock's lifetime and ended with the
// process however it ends. The holder writes who it is into the file, so that the next one to try
// can say whom it waits for: "pid 4242 on host node-3 since 2026-11-26 08:13:14 UTC: coordinator
// listening on 0.0.0.0:50051". The file stays; only the lock goes.
//
// Used for a coordinator's state directory and for run directories. Thread-compatible; movable,
// not copyable.
#pragma once

#include <string>
#include <utility>

#include "absl/status/statusor.h"

namespace tandem {

class FileLock {
 public:
  // Takes the lock on `path` without waiting, creating the file (not through a symlink), and
  // writes "pid P on host H since T: <holder>" into it. FailedPrecondition when another holder has
  // it, whose message is "<what> is in use by <the holder's line> (it holds <path>)"; the errno's
  // status naming the file when it cannot be opened.
  static absl::StatusOr<FileLock> Acquire(const std::string& path, const std::string& what,
                                          const std::string& holder);

  FileLock(FileLock&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
  FileLock& operator=(FileLock&& other) noexcept;
  FileLock(const FileLock&) = delete;
  FileLock& operator=(const FileLock&) = delete;
  ~FileLock();

 private:
  explicit FileLock(int fd) : fd_(fd) {}
  int fd_ = -1;
};

}  // namespace tandem
