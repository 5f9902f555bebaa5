// Crash-safe file writes: a reader sees either the old file or the whole new one, never a torn
// write. Write to "<path>.tmp.<pid>", fsync it, rename over path, fsync the directory.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace tandem {

// Writes `contents` to `path` atomically. Errors name the path and the failing system call.
absl::Status WriteFileAtomically(const std::string& path, std::string_view contents);

// Reads a whole file. NotFound when it does not exist; other errors name the path.
absl::StatusOr<std::string> ReadFile(const std::string& path);

// The most a file named by a user (a job spec's data, a tokenizer, a config) may hold.
inline constexpr int64_t kMaxUserFileBytes = int64_t{4} << 30;

// ReadFile for a path a user names: only a regular file is read, of at most max_bytes. A device
// (/dev/zero, a terminal), a FIFO, a socket or a directory is InvalidArgument naming the path and
// what it is, without reading from it or waiting on it; a larger file is InvalidArgument naming
// both sizes. Nothing of the file's contents appears in an error.
absl::StatusOr<std::string> ReadUserFile(const std::string& path,
                                         int64_t max_bytes = kMaxUserFileBytes);

// The checks of ReadUserFile without the read, for a file read in pieces (safetensors): OK for a
// regular file of at most max_bytes.
absl::Status CheckUserFile(const std::string& path, int64_t max_bytes = kMaxUserFileBytes);

// fsyncs a directory so a rename or a new file in it survives a crash.
absl::Status SyncDirectory(const std::string& directory);

}  // namespace tandem
