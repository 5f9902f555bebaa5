// Internal to engine_config/ (and the engine and the job's memory estimate, which match names):
// tandem.param_groups, the optimizer parameter groups of a config (config.h's ParamGroupConfig),
// and the name patterns that select their parameters.
#pragma once

#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "engine_config/config.h"
#include "engine_config/object_reader.h"

namespace tandem::engine_config {

// True when `name` matches `pattern` as a whole: '*' matches any run of characters (dots
// included), '?' any one character, anything else itself.
bool MatchesNamePattern(std::string_view pattern, std::string_view name);

namespace internal {

// Reads tandem.param_groups (absent: no groups) into `out`. Errors name the path, e.g.
// "tandem.param_groups[1].params: must be a non-empty array of strings".
absl::Status ParseParamGroups(const ObjectReader& tandem, std::vector<ParamGroupConfig>* out);

}  // namespace internal
}  // namespace tandem::engine_config
