#include "rundir/run_dir_lock.h"

#include <cerrno>
#include <filesystem>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace tandem::rundir {

absl::StatusOr<RunDirLock> RunDirLock::Acquire(const std::string& run_dir,
                                               const std::string& holder) {
  const std::string path = (std::filesystem::path(run_dir) / ".lock").string();
  ASSIGN_OR_RETURN(FileLock lock,
                   FileLock::Acquire(path, absl::StrCat("run directory ", run_dir), holder));
  return RunDirLock(std::move(lock), run_dir);
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

}  // namespace tandem::rundir
