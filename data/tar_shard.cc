#include "data/tar_shard.h"

#include <archive.h>
#include <archive_entry.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace tandem::data {
namespace {

constexpr int64_t kBlock = 512;
constexpr int64_t kMaxMemberBytes = int64_t{256} << 20;
constexpr size_t kReadChunk = 1 << 16;

// The file from `start` on, as libarchive's client: reads by pread, skips without reading.
struct Source {
  int fd = -1;
  int64_t size = 0;  // of the file
  int64_t start = 0;
  int64_t position = 0;  // relative to start
  std::string buffer = std::string(kReadChunk, '\0');
};

la_ssize_t ReadCallback(struct archive*, void* data, const void** out) {
  auto* source = static_cast<Source*>(data);
  const ssize_t n = ::pread(source->fd, source->buffer.data(), source->buffer.size(),
                            static_cast<off_t>(source->start + source->position));
  if (n < 0) return -1;
  source->position += n;
  *out = source->buffer.data();
  return n;
}

// Skips no further than the end of the file, so that a member cut short is a truncated archive.
la_int64_t SkipCallback(struct archive*, void* data, la_int64_t request) {
  auto* source = static_cast<Source*>(data);
  const la_int64_t left = std::max<int64_t>(0, source->size - source->start - source->position);
  const la_int64_t skipped = std::min(request, left);
  source->position += skipped;
  return skipped;
}

la_int64_t SeekCallback(struct archive*, void* data, la_int64_t offset, int whence) {
  auto* source = static_cast<Source*>(data);
  if (whence == SEEK_SET) {
    source->position = offset;
  } else if (whence == SEEK_CUR) {
    source->position += offset;
  } else {
    const off_t end = ::lseek(source->fd, 0, SEEK_END);
    if (end < 0) return ARCHIVE_FATAL;
    source->position = end - source->start + offset;
  }
  return source->position;
}

// A tar reader over `path` from byte `start` on; closes both on destruction.
class Reader {
 public:
  ~Reader() {
    if (archive_ != nullptr) archive_read_free(archive_);
    if (source_.fd >= 0) ::close(source_.fd);
  }

  absl::Status Open(const std::string& path, int64_t start) {
    path_ = path;
    source_.fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (source_.fd < 0) {
      const int error = errno;
      return absl::Status(
          error == ENOENT ? absl::StatusCode::kNotFound : absl::StatusCode::kPermissionDenied,
          absl::StrCat(path, ": cannot open: ", std::strerror(error)));
    }
    struct stat info;
    if (::fstat(source_.fd, &info) != 0) {
      return absl::PermissionDeniedError(
          absl::StrCat(path, ": cannot stat: ", std::strerror(errno)));
    }
    source_.size = static_cast<int64_t>(info.st_size);
    source_.start = start;
    archive_ = archive_read_new();
    if (archive_ == nullptr) return absl::ResourceExhaustedError("archive_read_new failed");
    archive_read_support_format_tar(archive_);
    archive_read_set_read_callback(archive_, ReadCallback);
    archive_read_set_skip_callback(archive_, SkipCallback);
    archive_read_set_seek_callback(archive_, SeekCallback);
    archive_read_set_callback_data(archive_, &source_);
    if (archive_read_open1(archive_) != ARCHIVE_OK) return Error("not a tar");
    return absl::OkStatus();
  }

  // The next entry, or nullptr at the end of the archive.
  absl::StatusOr<struct archive_entry*> Next() {
    struct archive_entry* entry = nullptr;
    const int result = archive_read_next_header(archive_, &entry);
    if (result == ARCHIVE_EOF) return nullptr;
    if (result < ARCHIVE_WARN) return Error("corrupt or truncated tar");
    return entry;
  }

  int64_t header_position() const { return source_.start + archive_read_header_position(archive_); }

  absl::StatusOr<std::string> Data(const std::string& member, int64_t size) {
    if (size > kMaxMemberBytes) {
      return absl::InvalidArgumentError(absl::StrCat(path_, ": member ", member, " holds ", size,
                                                     " bytes, more than the 256 MiB a member of a "
                                                     "sample may hold"));
    }
    if (size > source_.size - source_.start) {
      return absl::DataLossError(absl::StrCat(
          path_, ": member ", member, " (header at byte ", source_.start, ") is cut short: its ",
          size, " bytes run past the end of the file (", source_.size, " bytes)"));
    }
    std::string data(static_cast<size_t>(size), '\0');
    int64_t filled = 0;
    while (filled < size) {
      const la_ssize_t n =
          archive_read_data(archive_, data.data() + filled, static_cast<size_t>(size - filled));
      if (n < 0) return Error(absl::StrCat("cannot read member ", member));
      if (n == 0) {
        return absl::DataLossError(
            absl::StrCat(path_, ": member ", member, " is cut short at byte ",
                         source_.start + source_.position, " (", filled, " of ", size, " bytes)"));
      }
      filled += n;
    }
    return data;
  }

  absl::Status Error(std::string_view what) const {
    const char* detail = archive_ != nullptr ? archive_error_string(archive_) : nullptr;
    return absl::DataLossError(absl::StrCat(path_, ": ", std::string(what), " at byte ",
                                            source_.start + source_.position,
                                            detail != nullptr ? absl::StrCat(": ", detail) : ""));
  }

 private:
  std::string path_;
  Source source_;
  struct archive* archive_ = nullptr;
};

}  // namespace

absl::StatusOr<std::vector<TarMember>> ScanTar(const std::string& path, absl::Status* cut_short) {
  if (cut_short != nullptr) *cut_short = absl::OkStatus();
  Reader reader;
  RETURN_IF_ERROR(reader.Open(path, 0));
  std::vector<TarMember> members;
  for (;;) {
    absl::StatusOr<struct archive_entry*> next = reader.Next();
    if (!next.ok() && cut_short != nullptr && !members.empty()) {
      *cut_short = next.status();
      break;
    }
    ASSIGN_OR_RETURN(struct archive_entry * entry, std::move(next));
    if (entry == nullptr) break;
    if (archive_entry_filetype(entry) != AE_IFREG) continue;
    const char* name = archive_entry_pathname(entry);
    members.push_back({name != nullptr ? name : "", reader.header_position(),
                       static_cast<int64_t>(archive_entry_size(entry))});
  }
  return members;
}

absl::StatusOr<std::string> ReadTarMember(const std::string& path, const TarMember& member) {
  Reader reader;
  RETURN_IF_ERROR(reader.Open(path, member.header_offset));
  ASSIGN_OR_RETURN(struct archive_entry * entry, reader.Next());
  const char* name = entry != nullptr ? archive_entry_pathname(entry) : nullptr;
  if (name == nullptr || member.name != name || archive_entry_size(entry) != member.size) {
    return absl::DataLossError(absl::StrCat(path, ": member ", member.name,
                                            " is no longer at byte ", member.header_offset,
                                            " (the shard changed since it was indexed)"));
  }
  return reader.Data(member.name, member.size);
}

absl::StatusOr<std::vector<TarSample>> GroupTarSamples(const std::string& path,
                                                       std::vector<TarMember> members) {
  std::vector<TarSample> samples;
  for (TarMember& member : members) {
    const size_t slash = member.name.rfind('/');
    const size_t dot = member.name.find('.', slash == std::string::npos ? 0 : slash + 1);
    if (dot == std::string::npos || dot + 1 == member.name.size()) {
      return absl::InvalidArgumentError(absl::StrCat(
          path, ": member ", member.name, " at byte ", member.header_offset,
          " has no field after its key (WebDataset names members KEY.FIELD, e.g. 000001.json)"));
    }
    std::string key = member.name.substr(0, dot);
    std::string field = member.name.substr(dot + 1);
    if (samples.empty() || samples.back().key != key) {
      for (const TarSample& earlier : samples) {
        if (earlier.key == key) {
          return absl::InvalidArgumentError(
              absl::StrCat(path, ": member ", member.name, " at byte ", member.header_offset,
                           " comes back to key ", key,
                           " after other keys: a sample's members must be consecutive"));
        }
      }
      samples.push_back({std::move(key), {}, {}});
    }
    samples.back().fields.push_back(std::move(field));
    samples.back().members.push_back(std::move(member));
  }
  return samples;
}

absl::StatusOr<TarWriter> TarWriter::Create(const std::string& path) {
  struct archive* a = archive_write_new();
  if (a == nullptr) return absl::ResourceExhaustedError("archive_write_new failed");
  archive_write_set_format_pax_restricted(a);
  if (archive_write_open_filename(a, path.c_str()) != ARCHIVE_OK) {
    const absl::Status error = absl::PermissionDeniedError(
        absl::StrCat(path, ": cannot write: ", archive_error_string(a)));
    archive_write_free(a);
    return error;
  }
  return TarWriter(a, path);
}

TarWriter::TarWriter(struct archive* archive, std::string path)
    : archive_(archive), path_(std::move(path)) {}

TarWriter::TarWriter(TarWriter&& other) noexcept
    : archive_(std::exchange(other.archive_, nullptr)),
      path_(std::move(other.path_)),
      bytes_(other.bytes_) {}

TarWriter& TarWriter::operator=(TarWriter&& other) noexcept {
  if (this != &other) {
    if (archive_ != nullptr) archive_write_free(archive_);
    archive_ = std::exchange(other.archive_, nullptr);
    path_ = std::move(other.path_);
    bytes_ = other.bytes_;
  }
  return *this;
}

TarWriter::~TarWriter() {
  if (archive_ != nullptr) archive_write_free(archive_);  // closes it
}

absl::Status TarWriter::Add(const std::string& name, std::string_view data) {
  if (archive_ == nullptr) return absl::FailedPreconditionError(path_ + ": already closed");
  struct archive_entry* entry = archive_entry_new();
  archive_entry_set_pathname(entry, name.c_str());
  archive_entry_set_size(entry, static_cast<la_int64_t>(data.size()));
  archive_entry_set_filetype(entry, AE_IFREG);
  archive_entry_set_perm(entry, 0644);
  archive_entry_set_mtime(entry, 0, 0);
  absl::Status status;
  if (archive_write_header(archive_, entry) != ARCHIVE_OK ||
      archive_write_data(archive_, data.data(), data.size()) !=
          static_cast<la_ssize_t>(data.size())) {
    status = absl::DataLossError(
        absl::StrCat(path_, ": cannot write ", name, ": ", archive_error_string(archive_)));
  }
  archive_entry_free(entry);
  bytes_ += kBlock + (static_cast<int64_t>(data.size()) + kBlock - 1) / kBlock * kBlock;
  return status;
}

absl::Status TarWriter::Close() {
  if (archive_ == nullptr) return absl::OkStatus();
  const int closed = archive_write_close(archive_);
  const absl::Status status =
      closed == ARCHIVE_OK ? absl::OkStatus()
                           : absl::DataLossError(absl::StrCat(
                                 path_, ": cannot finish: ", archive_error_string(archive_)));
  archive_write_free(archive_);
  archive_ = nullptr;
  return status;
}

}  // namespace tandem::data
