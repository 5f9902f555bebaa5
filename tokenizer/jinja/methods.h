// The methods a template may call on a value, bound to it: str's strip, lstrip, rstrip, split,
// rsplit, splitlines, startswith, endswith, upper, lower, title, capitalize, replace, find, rfind,
// count, join, removeprefix, removesuffix, format ("{}" and "{0}" fields), isdigit, isalpha,
// isalnum, isspace, islower, isupper; dict's items, keys, values and get; list's index and count.
// Case changes are ASCII only. Nothing that changes a list or dict is bound (jinja2's immutable
// sandbox refuses them too). Stateless and thread-safe.
#pragma once

#include <optional>
#include <string>

#include "tokenizer/jinja/value.h"

namespace tandem::jinja {

// The method `name` of `object` as a callable, or nullopt when it has none by that name.
std::optional<Value> BoundMethod(const Value& object, const std::string& name);

// Python's str.upper, str.lower, str.title, str.capitalize, ASCII letters only.
std::string Upper(std::string s);
std::string Lower(std::string s);
std::string PythonTitle(const std::string& s);
std::string Capitalize(const std::string& s);
// Python's str.split(sep, maxsplit); a null sep splits on runs of whitespace.
std::vector<std::string> Split(const std::string& s, const std::string* sep, int64_t maxsplit);

}  // namespace tandem::jinja
