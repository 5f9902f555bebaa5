// Strict JSON parsing for every config Tandem reads: RFC 8259 syntax errors with a line and a column,
// and a key given twice in one object as an error (nlohmann-json would silently keep the last one).
// Stateless and thread-safe.
#pragma once

#include <string_view>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace tandem {

// Parses JSON text. A syntax error is InvalidArgument "line 3, column 17: invalid JSON: <reason>"; a
// duplicate key is InvalidArgument "<dotted.path.of.key>: duplicate key" (array elements as "[2]").
absl::StatusOr<nlohmann::json> ParseJsonStrict(std::string_view text);

}  // namespace tandem
