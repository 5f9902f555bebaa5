// POSIX implementation of common/atomic_file.h. Every error is absl::ErrnoToStatus of the failing
// call, so the code follows errno (ENOENT -> NotFound, EACCES -> PermissionDenied, ...) and the
// message reads "<what> <path>: <call> <file>: <strerror>".
#include "common/atomic_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <limits>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace tandem {
namespace {

// The directory holding `path`: "." for a bare name, "/" for a file in the root.
std::string DirectoryOf(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

absl::Status SyscallError(int error_number, absl::string_view what, absl::string_view call,
                          absl::string_view file) {
  return absl::ErrnoToStatus(error_number, absl::StrCat(what, ": ", call, " ", file));
}

// Writes all of `data` to `fd`, retrying short writes and EINTR. Returns 0 or an errno value.
int WriteAll(int fd, std::string_view data) {
  while (!data.empty()) {
    const ssize_t n = ::write(fd, data.data(), data.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      return errno;
    }
    data.remove_prefix(static_cast<size_t>(n));
  }
  return 0;
}

}  // namespace

absl::Status WriteFileAtomically(const std::string& path, std::string_view contents) {
  const std::string what = absl::StrCat("writing ", path);
  const std::string temp = absl::StrCat(path, ".tmp.", ::getpid());

  // A fresh file of our own: a leftover of an earlier process with this pid is removed, and a
  // symlink planted at the temporary name is not followed (O_EXCL refuses any existing name).
  ::unlink(temp.c_str());
  const int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
  if (fd < 0) return SyscallError(errno, what, "open", temp);

  // From here on the temp file exists and is removed on every failure.
  auto fail = [&](int error_number, absl::string_view call, absl::string_view file) {
    ::unlink(temp.c_str());
    return SyscallError(error_number, what, call, file);
  };
  if (const int error_number = WriteAll(fd, contents); error_number != 0) {
    ::close(fd);
    return fail(error_number, "write", temp);
  }
  if (::fsync(fd) != 0) {
    const int error_number = errno;
    ::close(fd);
    return fail(error_number, "fsync", temp);
  }
  if (::close(fd) != 0) return fail(errno, "close", temp);
  if (::rename(temp.c_str(), path.c_str()) != 0) {
    return fail(errno, "rename", absl::StrCat(temp, " -> ", path));
  }
  if (absl::Status synced = SyncDirectory(DirectoryOf(path)); !synced.ok()) {
    return absl::Status(synced.code(), absl::StrCat(what, ": ", synced.message()));
  }
  return absl::OkStatus();
}

namespace {

// Reads `fd` to its end and closes it, straight into the string: sized to the file when fstat
// knows it, growing by chunks otherwise (pipes, /proc files). Stops once it holds more than
// `limit` bytes (the caller refuses that).
absl::StatusOr<std::string> ReadAllAndClose(int fd, const std::string& path, int64_t limit) {
  constexpr size_t kChunk = size_t{1} << 20;
  struct stat info;
  size_t capacity = kChunk;
  if (::fstat(fd, &info) == 0 && S_ISREG(info.st_mode) && info.st_size > 0) {
    capacity = static_cast<size_t>(info.st_size) + 1;  // + 1 to see end of file in one read
  }
  std::string contents(capacity, '\0');
  size_t size = 0;
  while (static_cast<int64_t>(size) <= limit) {
    if (size == contents.size()) contents.resize(contents.size() + kChunk);
    const ssize_t n = ::read(fd, contents.data() + size, contents.size() - size);
    if (n == 0) break;
    if (n < 0) {
      if (errno == EINTR) continue;
      const int error_number = errno;
      ::close(fd);
      return SyscallError(error_number, absl::StrCat("reading ", path), "read", path);
    }
    size += static_cast<size_t>(n);
  }
  ::close(fd);
  contents.resize(size);
  return contents;
}

}  // namespace

absl::StatusOr<std::string> ReadFile(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return SyscallError(errno, absl::StrCat("reading ", path), "open", path);
  return ReadAllAndClose(fd, path, std::numeric_limits<int64_t>::max());
}

namespace {

const char* KindOf(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a regular file";
}

// Opens `path` without blocking (a FIFO's open would wait for a writer) and checks what it is.
absl::StatusOr<int> OpenUserFile(const std::string& path, int64_t max_bytes) {
  const std::string what = absl::StrCat("reading ", path);
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
  if (fd < 0) return SyscallError(errno, what, "open", path);
  struct stat info;
  if (::fstat(fd, &info) != 0) {
    const int error_number = errno;
    ::close(fd);
    return SyscallError(error_number, what, "fstat", path);
  }
  if (!S_ISREG(info.st_mode)) {
    ::close(fd);
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": ", KindOf(info.st_mode), ", not a regular file"));
  }
  if (info.st_size > max_bytes) {
    ::close(fd);
    return absl::InvalidArgumentError(absl::StrCat(
        path, ": ", info.st_size, " bytes, more than the ", max_bytes, " this reader takes"));
  }
  return fd;
}

}  // namespace

absl::Status CheckUserFile(const std::string& path, int64_t max_bytes) {
  ASSIGN_OR_RETURN(const int fd, OpenUserFile(path, max_bytes));
  ::close(fd);
  return absl::OkStatus();
}

absl::StatusOr<std::string> ReadUserFile(const std::string& path, int64_t max_bytes) {
  // The descriptor checked is the one read: a regular file, which never blocks; one that grows
  // while it is read stops past the bound.
  ASSIGN_OR_RETURN(const int fd, OpenUserFile(path, max_bytes));
  ASSIGN_OR_RETURN(std::string contents, ReadAllAndClose(fd, path, max_bytes));
  if (static_cast<int64_t>(contents.size()) > max_bytes) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": more than the ", max_bytes, " bytes this reader takes"));
  }
  return contents;
}

absl::Status SyncDirectory(const std::string& directory) {
  const std::string what = absl::StrCat("syncing directory ", directory);
  const int fd = ::open(directory.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return SyscallError(errno, what, "open", directory);
  if (::fsync(fd) != 0) {
    const int error_number = errno;
    ::close(fd);
    return SyscallError(error_number, what, "fsync", directory);
  }
  ::close(fd);
  return absl::OkStatus();
}

}  // namespace tandem
