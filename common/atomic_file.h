// Crash-safe file writes: a reader sees either the old file or the whole new one, never a torn write.
// Write to "<path>.tmp.<pid>", fsync it, rename over path, fsync the directory.
#pragma once

#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace tandem {

// Writes `contents` to `path` atomically. Errors name the path and the failing system call.
absl::Status WriteFileAtomically(const std::string& path, std::string_view contents);

// Reads a whole file. NotFound when it does not exist; other errors name the path.
absl::StatusOr<std::string> ReadFile(const std::string& path);

// fsyncs a directory so a rename or a new file in it survives a crash.
absl::Status SyncDirectory(const std::string& directory);

}  // namespace tandem
