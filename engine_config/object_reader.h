// Internal to engine_config/: one JSON object of a DeepSpeed-style config, read strictly. Open
// checks the object's key set once; the typed reads then fill values, leaving the output untouched
// for an absent key so that the config struct's defaults stand. Every error is InvalidArgument
// "<dotted.key.path>: <what>", the form engine_config/config.h promises. Integers go through
// common/strict_json.h's ReadJsonInteger.
//
// An ObjectReader points into the document it was opened on, which must outlive it. Stateless
// otherwise; thread-compatible.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/types/span.h"
#include "nlohmann/json.hpp"

namespace tandem::engine_config::internal {

// The keys an object may hold; anything else is an "unknown key" error.
using Keys = absl::Span<const std::string_view>;

bool Contains(Keys keys, std::string_view key);

// This Abseil's string_view is its own type, so std::string_view goes through this into StrCat.
inline absl::string_view Sv(std::string_view s) { return absl::string_view(s.data(), s.size()); }

// InvalidArgument "<path>: <what...>".
template <typename... Args>
absl::Status Error(std::string_view path, const Args&... what) {
  return absl::InvalidArgumentError(absl::StrCat(Sv(path), ": ", what...));
}

// "\"text\"", for values quoted in messages.
std::string Quoted(std::string_view s);

// "got string \"x\"" / "got number" / ...: the second half of a type error.
std::string Got(const nlohmann::json& v);

// What a Number read accepts besides finite numbers.
enum class Bound { kAny, kNonNegative, kPositive };

class ObjectReader {
 public:
  // `path` names the object itself, `child_prefix` is put in front of its keys. Errors: "<path>:
  // must be an object, got ..." and "<child_prefix><key>: unknown key".
  static absl::StatusOr<ObjectReader> Open(const nlohmann::json& value, std::string path,
                                           std::string child_prefix, Keys known);

  // Opens the object under `key` of this one. REQUIRES: Has(key).
  absl::StatusOr<ObjectReader> Child(std::string_view key, Keys known) const;

  const nlohmann::json* Find(std::string_view key) const;
  bool Has(std::string_view key) const { return Find(key) != nullptr; }
  std::string PathOf(std::string_view key) const { return absl::StrCat(child_prefix_, Sv(key)); }

  absl::Status Bool(std::string_view key, bool* out) const;
  absl::Status String(std::string_view key, std::string* out) const;
  absl::Status Number(std::string_view key, Bound bound, double* out) const;
  // Integers may be written as integral floats ("reduce_bucket_size": 5e8), as DeepSpeed allows,
  // but not as strings. Errors: "must be an integer", "out of range" (beyond int64_t), and
  // "must be >= <min>".
  absl::Status Int(std::string_view key, int64_t min, int64_t* out) const;
  // Adam's betas: an array of exactly 2 numbers, each in [0, 1).
  absl::Status Betas(std::string_view key, double* beta1, double* beta2) const;

 private:
  ObjectReader(const nlohmann::json& value, std::string child_prefix)
      : value_(&value), child_prefix_(std::move(child_prefix)) {}

  const nlohmann::json* value_;
  std::string child_prefix_;
};

}  // namespace tandem::engine_config::internal
