// Tar shards as WebDataset lays them out: a sample is the run of consecutive members that share a
// key, the member's path up to the first dot of its file name ("000012.json", "000012.0.png",
// "000012.1.png" are sample "000012", fields "json", "0.png", "1.png").
//
// Reading and writing go through libarchive (ustar and pax; GNU tar's long names too), never by
// hand: ScanTar reads the headers once, skipping the data, and remembers where each member's
// header starts; ReadTarMember starts a reader there and takes that one member, so a rank reads
// the bytes of its own samples only.
//
// Errors name the shard, the member and the byte offset: DataLoss for a truncated or corrupt tar
// or a member that is no longer where the scan found it (the file changed), InvalidArgument for a
// key that comes back after other keys (its members must be consecutive).
//
// Thread-safe: no shared state; each call opens its own reader.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

struct archive;

namespace tandem::data {

struct TarMember {
  std::string name;           // its path in the tar
  int64_t header_offset = 0;  // where its first header block starts in the file
  int64_t size = 0;           // bytes of data
};

// Every regular file of the tar at `path`, in order (directories and links are left out). With
// `cut_short`, a tar that turns out truncated or corrupt after its first member gives the members
// before the fault, the fault's error in *cut_short (OK otherwise): the last of them may be cut
// short, which ReadTarMember reports.
absl::StatusOr<std::vector<TarMember>> ScanTar(const std::string& path,
                                               absl::Status* cut_short = nullptr);

// The data of `member` of the tar at `path`, as ScanTar found it. InvalidArgument for a member of
// more than 256 MiB (no text or image of a sample is that large).
absl::StatusOr<std::string> ReadTarMember(const std::string& path, const TarMember& member);

// One WebDataset sample: its key and its members, in tar order, each with its field (the name
// after the key's dot).
struct TarSample {
  std::string key;
  std::vector<std::string> fields;
  std::vector<TarMember> members;
};

// The samples of a scanned tar (ScanTar), `path` naming it in errors.
absl::StatusOr<std::vector<TarSample>> GroupTarSamples(const std::string& path,
                                                       std::vector<TarMember> members);

// Writes a tar (pax, ustar where it suffices) with reproducible headers: mode 0644, owner 0, time
// 0, so the same samples give the same bytes and the same checksum.
class TarWriter {
 public:
  static absl::StatusOr<TarWriter> Create(const std::string& path);
  TarWriter(TarWriter&&) noexcept;
  TarWriter& operator=(TarWriter&&) noexcept;
  ~TarWriter();  // closes, if Close was not called

  absl::Status Add(const std::string& name, std::string_view data);
  // Writes the end of the archive; later Adds fail.
  absl::Status Close();
  // Bytes the archive takes so far: each member's 512-byte header and its data in whole blocks.
  int64_t bytes() const { return bytes_; }
  const std::string& path() const { return path_; }

 private:
  TarWriter(struct archive* archive, std::string path);
  struct archive* archive_ = nullptr;
  std::string path_;
  int64_t bytes_ = 0;
};

}  // namespace tandem::data
