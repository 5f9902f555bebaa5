// Internal to jobspec/: building the "<source>: <path>: <what>" messages of jobspec/job_spec.h.
#pragma once

#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/quote.h"

namespace tandem::jobspec::internal {

// This Abseil's string_view is its own type, so std::string_view goes through this into StrCat.
inline absl::string_view Sv(std::string_view s) { return absl::string_view(s.data(), s.size()); }

// InvalidArgument "<path>: <what...>", or "<what...>" for an empty path.
template <typename... Args>
absl::Status PathError(std::string_view path, const Args&... what) {
  if (path.empty()) return absl::InvalidArgumentError(absl::StrCat(what...));
  return absl::InvalidArgumentError(absl::StrCat(Sv(path), ": ", what...));
}

// "a.b" from "a" and "b"; just "b" under the document root ("").
inline std::string JoinPath(std::string_view path, std::string_view key) {
  return path.empty() ? std::string(key) : absl::StrCat(Sv(path), ".", Sv(key));
}

// The same status with "<source>: " in front of its message (unchanged for OK or an empty source).
inline absl::Status WithSource(const absl::Status& status, std::string_view source) {
  if (status.ok() || source.empty()) return status;
  return absl::Status(status.code(), absl::StrCat(Sv(source), ": ", status.message()));
}

// "\"text\"", for values quoted in messages: escaped and cut short (common/quote.h).
inline std::string Quoted(std::string_view s) { return QuoteForMessage(s); }

}  // namespace tandem::jobspec::internal
