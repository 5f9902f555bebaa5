#include "engine_config/param_groups.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "nlohmann/json.hpp"

namespace tandem::engine_config {

bool MatchesNamePattern(std::string_view pattern, std::string_view name) {
  // Iterative glob: on a mismatch, let the last '*' swallow one more character.
  size_t p = 0, n = 0, star = std::string_view::npos, resume = 0;
  while (n < name.size()) {
    if (p < pattern.size() && (pattern[p] == '?' || pattern[p] == name[n])) {
      ++p;
      ++n;
    } else if (p < pattern.size() && pattern[p] == '*') {
      star = p++;
      resume = n;
    } else if (star != std::string_view::npos) {
      p = star + 1;
      n = ++resume;
    } else {
      return false;
    }
  }
  while (p < pattern.size() && pattern[p] == '*') ++p;
  return p == pattern.size();
}

namespace internal {
namespace {

constexpr std::string_view kGroupKeys[] = {"params", "lr", "weight_decay", "betas", "eps"};

absl::Status ReadOptional(const ObjectReader& group, std::string_view key, Bound bound,
                          std::optional<double>* out) {
  if (!group.Has(key)) return absl::OkStatus();
  double value = 0.0;
  RETURN_IF_ERROR(group.Number(key, bound, &value));
  *out = value;
  return absl::OkStatus();
}

}  // namespace

absl::Status ParseParamGroups(const ObjectReader& tandem, std::vector<ParamGroupConfig>* out) {
  const nlohmann::json* groups = tandem.Find("param_groups");
  if (groups == nullptr) return absl::OkStatus();
  const std::string path = tandem.PathOf("param_groups");
  if (!groups->is_array()) return Error(path, "must be an array of objects, ", Got(*groups));
  for (size_t i = 0; i < groups->size(); ++i) {
    ParamGroupConfig group;
    group.path = absl::StrCat(path, "[", i, "]");
    ASSIGN_OR_RETURN(ObjectReader reader,
                     ObjectReader::Open((*groups)[i], group.path, group.path + ".", kGroupKeys));
    const nlohmann::json* params = reader.Find("params");
    const std::string params_path = reader.PathOf("params");
    if (params == nullptr) return Error(params_path, "required");
    if (!params->is_array()) {
      return Error(params_path, "must be a non-empty array of name patterns, ", Got(*params));
    }
    if (params->empty()) return Error(params_path, "must be a non-empty array of name patterns");
    for (size_t k = 0; k < params->size(); ++k) {
      const nlohmann::json& pattern = (*params)[k];
      if (!pattern.is_string() || pattern.get<std::string>().empty()) {
        return Error(absl::StrCat(params_path, "[", k, "]"), "must be a non-empty string, ",
                     Got(pattern));
      }
      group.params.push_back(pattern.get<std::string>());
    }
    RETURN_IF_ERROR(ReadOptional(reader, "lr", Bound::kNonNegative, &group.lr));
    RETURN_IF_ERROR(ReadOptional(reader, "weight_decay", Bound::kNonNegative, &group.weight_decay));
    RETURN_IF_ERROR(ReadOptional(reader, "eps", Bound::kPositive, &group.eps));
    if (reader.Has("betas")) {
      double beta1 = 0.0, beta2 = 0.0;
      RETURN_IF_ERROR(reader.Betas("betas", &beta1, &beta2));
      group.beta1 = beta1;
      group.beta2 = beta2;
    }
    out->push_back(std::move(group));
  }
  return absl::OkStatus();
}

}  // namespace internal
}  // namespace tandem::engine_config
