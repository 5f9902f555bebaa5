#include "common/file_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <ctime>

#include "absl/strings/str_cat.h"

namespace tandem {
namespace {

// What the holder wrote: its first line, at most 200 bytes, printable ASCII only (the file may
// have been written by anything).
std::string ReadHolder(int fd) {
  char buffer[201] = {};
  const ssize_t n = ::pread(fd, buffer, sizeof buffer - 1, 0);
  std::string line;
  for (ssize_t i = 0; i < n && buffer[i] != '\n'; ++i) {
    const unsigned char c = static_cast<unsigned char>(buffer[i]);
    line += (c >= 0x20 && c < 0x7f) ? static_cast<char>(c) : '?';
  }
  return line.empty() ? "another process" : line;
}

std::string Describe(const std::string& holder) {
  char host[256] = {};
  if (::gethostname(host, sizeof host - 1) != 0) host[0] = '\0';
  const std::time_t now = std::time(nullptr);
  std::tm utc{};
  ::gmtime_r(&now, &utc);
  char since[32] = {};
  std::strftime(since, sizeof since, "%Y-%m-%d %H:%M:%S UTC", &utc);
  return absl::StrCat("pid ", ::getpid(), " on host ", host, " since ", since, ": ", holder, "\n");
}

}  // namespace

absl::StatusOr<FileLock> FileLock::Acquire(const std::string& path, const std::string& what,
                                           const std::string& holder) {
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);
  if (fd < 0) return absl::ErrnoToStatus(errno, absl::StrCat("cannot open the lock file ", path));
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int error = errno;
    const std::string other = ReadHolder(fd);
    ::close(fd);
    if (error == EWOULDBLOCK) {
      return absl::FailedPreconditionError(
          absl::StrCat(what, " is in use by ", other, " (it holds ", path, ")"));
    }
    return absl::ErrnoToStatus(error, absl::StrCat("cannot lock ", path));
  }
  const std::string line = Describe(holder);
  // Who holds it is for messages only: a failure to say so does not undo the lock.
  if (::ftruncate(fd, 0) == 0) (void)!::pwrite(fd, line.data(), line.size(), 0);
  return FileLock(fd);
}

FileLock& FileLock::operator=(FileLock&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = std::exchange(other.fd_, -1);
  }
  return *this;
}

FileLock::~FileLock() {
  if (fd_ >= 0) ::close(fd_);
}

}  // namespace tandem
