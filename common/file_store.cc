// FileStore: the KeyValueStore of kv_store.h on a directory.
//
// Layout: key K lives in "k.<hex(K)>" (hex keeps any byte string a valid, unambiguous file name);
// Add serialises through flock on "l.<hex(K)>". Values are written to a mkstemp file and renamed
// into place, so a reader sees a whole value or none. Nothing is fsync'ed: the files only serve a
// group's rendezvous, which does not outlive a machine crash.
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/kv_store.h"

namespace tandem {
namespace {

// A file name is at most 255 bytes: "k." plus two hex digits per key byte.
constexpr size_t kMaxKeyBytes = 126;

std::string Hex(const std::string& key) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out;
  out.reserve(2 * key.size());
  for (unsigned char c : key) {
    out.push_back(kDigits[c >> 4]);
    out.push_back(kDigits[c & 0xf]);
  }
  return out;
}

// Closes a file descriptor on scope exit.
class FdCloser {
 public:
  explicit FdCloser(int fd) : fd_(fd) {}
  ~FdCloser() {
    if (fd_ >= 0) ::close(fd_);
  }
  FdCloser(const FdCloser&) = delete;
  FdCloser& operator=(const FdCloser&) = delete;

 private:
  int fd_;
};

class FileStore final : public KeyValueStore {
 public:
  explicit FileStore(std::string directory) : directory_(std::move(directory)) {}

  absl::Status Set(const std::string& key, const std::string& value) override {
    auto path = KeyPath(key, "Set");
    if (!path.ok()) return path.status();
    return WriteAtomically(key, *path, value);
  }

  absl::StatusOr<std::string> Get(const std::string& key,
                                  std::chrono::milliseconds timeout) override {
    auto path = KeyPath(key, "Get");
    if (!path.ok()) return path.status();
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    auto interval = std::chrono::microseconds(500);
    while (true) {
      std::string value;
      absl::Status read = ReadValue(key, *path, &value);
      if (read.ok()) return value;
      if (!absl::IsNotFound(read)) return read;
      const auto now = std::chrono::steady_clock::now();
      if (now >= deadline) {
        return absl::DeadlineExceededError(absl::StrCat("FileStore ", directory_, ": key \"", key,
                                                        "\" was not set within ", timeout.count(),
                                                        " ms"));
      }
      std::this_thread::sleep_for(
          std::min<std::chrono::steady_clock::duration>(interval, deadline - now));
      interval = std::min(interval * 2, std::chrono::microseconds(20000));
    }
  }

  absl::StatusOr<int64_t> Add(const std::string& key, int64_t delta) override {
    auto path = KeyPath(key, "Add");
    if (!path.ok()) return path.status();
    const std::string lock_path = absl::StrCat(directory_, "/l.", Hex(key));
    int lock_fd = ::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (lock_fd < 0) return Errno("open lock file for Add", key, lock_path);
    FdCloser closer(lock_fd);
    int rc;
    do {
      rc = ::flock(lock_fd, LOCK_EX);
    } while (rc != 0 && errno == EINTR);
    if (rc != 0) return Errno("flock for Add", key, lock_path);
    // The lock is released when lock_fd is closed.
    std::string current;
    int64_t value = 0;
    absl::Status read = ReadValue(key, *path, &current);
    if (read.ok()) {
      auto [end, ec] = std::from_chars(current.data(), current.data() + current.size(), value);
      if (ec != std::errc() || end != current.data() + current.size()) {
        return absl::FailedPreconditionError(absl::StrCat(
            "FileStore ", directory_, ": Add on key \"", key, "\" whose value is not an integer"));
      }
    } else if (!absl::IsNotFound(read)) {
      return read;
    }
    if (__builtin_add_overflow(value, delta, &value)) {
      return absl::OutOfRangeError(absl::StrCat("FileStore ", directory_, ": Add on key \"", key,
                                                "\": adding ", delta,
                                                " overflows a 64-bit integer"));
    }
    absl::Status write = WriteAtomically(key, *path, std::to_string(value));
    if (!write.ok()) return write;
    return value;
  }

  absl::StatusOr<bool> Check(const std::string& key) override {
    auto path = KeyPath(key, "Check");
    if (!path.ok()) return path.status();
    struct stat st;
    if (::stat(path->c_str(), &st) == 0) return true;
    if (errno == ENOENT) return false;
    return Errno("stat", key, *path);
  }

  absl::Status Delete(const std::string& key) override {
    auto path = KeyPath(key, "Delete");
    if (!path.ok()) return path.status();
    if (::unlink(path->c_str()) == 0) return absl::OkStatus();
    if (errno == ENOENT) {
      return absl::NotFoundError(
          absl::StrCat("FileStore ", directory_, ": Delete of absent key \"", key, "\""));
    }
    return Errno("unlink", key, *path);
  }

 private:
  absl::StatusOr<std::string> KeyPath(const std::string& key, const char* operation) const {
    if (key.empty() || key.size() > kMaxKeyBytes) {
      return absl::InvalidArgumentError(absl::StrCat("FileStore ", directory_, ": ", operation,
                                                     " with a key of ", key.size(), " bytes (1 to ",
                                                     kMaxKeyBytes, " allowed)"));
    }
    return absl::StrCat(directory_, "/k.", Hex(key));
  }

  absl::Status Errno(const char* what, const std::string& key, const std::string& path,
                     int error = errno) const {
    return absl::InternalError(absl::StrCat("FileStore ", directory_, ": key \"", key, "\": ", what,
                                            " ", path, ": ", std::strerror(error)));
  }

  // NotFound (without a message worth showing) when the key file does not exist.
  absl::Status ReadValue(const std::string& key, const std::string& path,
                         std::string* value) const {
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
      if (errno == ENOENT) return absl::NotFoundError(key);
      return Errno("open", key, path);
    }
    FdCloser closer(fd);
    value->clear();
    char buffer[4096];
    while (true) {
      ssize_t n = ::read(fd, buffer, sizeof(buffer));
      if (n == 0) return absl::OkStatus();
      if (n < 0) {
        if (errno == EINTR) continue;
        return Errno("read", key, path);
      }
      value->append(buffer, static_cast<size_t>(n));
    }
  }

  absl::Status WriteAtomically(const std::string& key, const std::string& path,
                               const std::string& value) const {
    std::string temp = directory_ + "/.tmp.XXXXXX";
    std::vector<char> name(temp.begin(), temp.end());
    name.push_back('\0');
    int fd = ::mkstemp(name.data());
    if (fd < 0) return Errno("mkstemp", key, temp);
    temp.assign(name.data());
    int error = 0;
    size_t offset = 0;
    while (offset < value.size()) {
      ssize_t n = ::write(fd, value.data() + offset, value.size() - offset);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) {
        error = errno;
        break;
      }
      offset += static_cast<size_t>(n);
    }
    if (::close(fd) != 0 && error == 0) error = errno;
    if (error != 0) {
      ::unlink(temp.c_str());
      return Errno("write", key, temp, error);
    }
    if (::rename(temp.c_str(), path.c_str()) != 0) {
      error = errno;
      ::unlink(temp.c_str());
      return Errno("rename into", key, path, error);
    }
    return absl::OkStatus();
  }

  const std::string directory_;
};

}  // namespace

absl::StatusOr<std::shared_ptr<KeyValueStore>> OpenFileStore(const std::string& directory) {
  if (directory.empty()) return absl::InvalidArgumentError("FileStore: empty directory name");
  std::error_code ec;
  if (std::filesystem::exists(directory, ec) && !std::filesystem::is_directory(directory, ec)) {
    return absl::FailedPreconditionError(
        absl::StrCat("FileStore ", directory, ": exists and is not a directory"));
  }
  std::filesystem::create_directories(directory, ec);
  if (ec) {
    return absl::InternalError(
        absl::StrCat("FileStore ", directory, ": cannot create directory: ", ec.message()));
  }
  return std::make_shared<FileStore>(directory);
}

}  // namespace tandem
