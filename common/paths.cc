#include "common/paths.h"

#include <algorithm>
#include <filesystem>
#include <system_error>

namespace tandem {

namespace fs = std::filesystem;

std::optional<fs::path> ResolveDirectory(const std::string& directory) {
  std::error_code ec;
  const fs::path root = fs::weakly_canonical(fs::absolute(directory, ec), ec);
  if (ec) return std::nullopt;
  return root;
}

bool IsInside(const std::string& path, const std::string& directory) {
  const std::optional<fs::path> root = ResolveDirectory(directory);
  return root && IsInsideResolved(path, *root);
}

bool IsInsideResolved(const std::string& path, const fs::path& root) {
  std::error_code ec;
  const fs::path resolved = fs::weakly_canonical(fs::absolute(path, ec), ec);
  if (ec) return false;
  // Component by component: /data/set is not inside /data/s.
  auto r = root.begin();
  auto p = resolved.begin();
  for (; r != root.end(); ++r, ++p) {
    if (r->empty()) continue;  // a trailing separator
    if (p == resolved.end() || *p != *r) return false;
  }
  return true;
}

}  // namespace tandem
