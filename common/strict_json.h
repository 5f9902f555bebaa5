// Strict JSON for every config Tandem reads: parsing with RFC 8259 syntax errors that carry a line
// and a column and a key given twice in one object as an error (nlohmann-json would silently keep
// the last one), and the typed reads that the parsers of those documents share (an integer in any
// of its JSON forms; a value described for an error message). Torch-free and proto-free, so the
// job spec (jobspec/), the engine config (engine_config/) and the datasets read JSON the same way.
// Stateless and thread-safe.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace tandem {

// Containers nest at most this deep in any document ParseJsonStrict takes: no config Tandem reads
// nests past 10, and every walker of a parsed document may recurse.
inline constexpr size_t kMaxJsonDepth = 128;

// Parses JSON text (RFC 8259: no comments, no trailing commas). A syntax error is InvalidArgument
// "line 3, column 17: invalid JSON: <reason>"; a duplicate key is InvalidArgument
// "<dotted.path.of.key>: duplicate key" (array elements as "[2]"); a container nested deeper than
// kMaxJsonDepth is InvalidArgument "line 1, column 129: invalid JSON: nested more than 128 levels
// deep". Time and memory are linear in the text's size.
absl::StatusOr<nlohmann::json> ParseJsonStrict(std::string_view text);

// An integer read from JSON by ReadJsonInteger. Its sign picks the field that holds it, so every
// int64_t and every uint64_t fits.
struct JsonInteger {
  enum class Kind {
    kInteger,       // `negative` says which of as_signed and as_unsigned holds it
    kNotAnInteger,  // another type, a fraction, or a string that is not a decimal integer
    kOutOfRange,    // an integral float below -2^63 or at or above 2^64
  };
  Kind kind = Kind::kNotAnInteger;
  bool negative = false;
  int64_t as_signed = 0;     // when negative
  uint64_t as_unsigned = 0;  // when not negative

  // Whether it is an integer in [min, max].
  bool InRange(int64_t min, uint64_t max) const;
  // The value, when it is an integer that fits an int64_t.
  std::optional<int64_t> ToInt64() const;
};

// Whether ReadJsonInteger takes decimal strings ("12", "-3"), as proto3 JSON writes 64-bit
// integers.
enum class JsonIntegerStrings { kReject, kAccept };

// Reads an integer written as a JSON integer or as an integral float (1e3, 5e8), as both proto3
// JSON and DeepSpeed allow; with JsonIntegerStrings::kAccept also as a decimal string. A decimal
// string beyond 64 bits is kNotAnInteger.
JsonInteger ReadJsonInteger(const nlohmann::json& value,
                            JsonIntegerStrings strings = JsonIntegerStrings::kReject);

// "string \"x\"", "number 1.5", "boolean true", "null", "array", "object": what a type error says
// it got. Strings longer than 60 characters are cut, with "..." before the closing quote.
std::string DescribeJsonValue(const nlohmann::json& value);

}  // namespace tandem
