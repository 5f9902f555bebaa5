// Arguments of a builtin call bound to its parameters by position or keyword, as Python binds
// them: InvalidArgument for too many positional arguments, an unknown keyword or one given twice
// ("join() got an unexpected keyword argument 'sep'"). A parameter not given is undefined.
#pragma once

#include <initializer_list>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "tokenizer/jinja/value.h"

namespace tandem::jinja {

inline absl::StatusOr<std::vector<Value>> Bind(const CallArgs& args, std::string_view function,
                                               std::initializer_list<std::string_view> names) {
  std::vector<Value> out(names.size());
  if (args.positional.size() > names.size()) {
    return absl::InvalidArgumentError(absl::StrCat(std::string(function), "() takes at most ",
                                                   names.size(), " arguments (",
                                                   args.positional.size(), " given)"));
  }
  for (size_t i = 0; i < args.positional.size(); ++i) out[i] = args.positional[i];
  for (const auto& [key, value] : args.keyword) {
    size_t i = 0;
    for (std::string_view name : names) {
      if (name == key) break;
      ++i;
    }
    if (i == names.size()) {
      return absl::InvalidArgumentError(
          absl::StrCat(std::string(function), "() got an unexpected keyword argument '", key, "'"));
    }
    if (i < args.positional.size()) {
      return absl::InvalidArgumentError(
          absl::StrCat(std::string(function), "() got multiple values for argument '", key, "'"));
    }
    out[i] = value;
  }
  return out;
}

}  // namespace tandem::jinja
