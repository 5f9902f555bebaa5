#include "rundir/run_dir_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <utility>

#include "absl/strings/str_cat.h"

namespace tandem::rundir {

absl::StatusOr<RunDirLock> RunDirLock::Acquire(const std::string& run_dir) {
  const std::string path = (std::filesystem::path(run_dir) / ".lock").string();
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);
  if (fd < 0) return absl::ErrnoToStatus(errno, absl::StrCat("cannot open the lock of run directory ", path));
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int error = errno;
    ::close(fd);
    if (error == EWOULDBLOCK) {
      return absl::FailedPreconditionError(absl::StrCat(
          "run directory ", run_dir, " is in use by another job or process (it holds ", path, ")"));
    }
    return absl::ErrnoToStatus(error, absl::StrCat("cannot lock ", path));
  }
  return RunDirLock(fd, run_dir);
}

absl::StatusOr<int> RunDirLock::RemoveLeftoverTempFiles() const {
  namespace fs = std::filesystem;
  int removed = 0;
  std::error_code ec;
  for (fs::recursive_directory_iterator it(run_dir_, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    const size_t at = name.rfind(".tmp.");
    if (at == std::string::npos || !it->is_regular_file(ec)) continue;
    const std::string pid = name.substr(at + 5);
    if (pid.empty() || pid.find_first_not_of("0123456789") != std::string::npos) continue;
    if (!fs::remove(it->path(), ec) || ec) {
      return absl::ErrnoToStatus(ec.value(), absl::StrCat("cannot remove ", it->path().string()));
    }
    ++removed;
  }
  if (ec) return absl::ErrnoToStatus(ec.value(), absl::StrCat("cannot list ", run_dir_));
  return removed;
}

RunDirLock::RunDirLock(RunDirLock&& other) noexcept
    : fd_(std::exchange(other.fd_, -1)), run_dir_(std::move(other.run_dir_)) {}

RunDirLock& RunDirLock::operator=(RunDirLock&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = std::exchange(other.fd_, -1);
    run_dir_ = std::move(other.run_dir_);
  }
  return *this;
}

RunDirLock::~RunDirLock() {
  if (fd_ >= 0) ::close(fd_);
}

}  // namespace tandem::rundir
