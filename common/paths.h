// Whether a path stays inside a directory, as the file system will resolve it: both are made
// absolute and their existing parts' symlinks followed (std::filesystem::weakly_canonical), and
// "..", "." and repeated separators go. For the paths a job or a peer names, which must not reach
// outside the directory they belong to (a run directory, a dataset's folder).
#pragma once

#include <filesystem>
#include <optional>
#include <string>

namespace tandem {

// True when `path` is `directory` itself or anything below it. False when either cannot be
// resolved (a permission error on a part of it).
bool IsInside(const std::string& path, const std::string& directory);

// The same in two halves, for many paths checked against one directory (a dataset's images):
// the directory resolved once (nullopt when it cannot be), then each path against it.
std::optional<std::filesystem::path> ResolveDirectory(const std::string& directory);
bool IsInsideResolved(const std::string& path, const std::filesystem::path& resolved_directory);

}  // namespace tandem
