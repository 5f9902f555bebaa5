// What a chat template can call and apply: operators with Python's semantics, attribute and item
// access as jinja2's sandbox resolves them, the filters and tests Hugging Face templates use, the
// methods of str, dict and list they call, and the globals transformers provides (range,
// namespace, dict, raise_exception, strftime_now).
//
// Sandbox rules kept from jinja2's ImmutableSandboxedEnvironment: nothing reaches a list or dict
// to change it (append, update, pop are not there), names starting with "_" are not attributes,
// and range() stops at 100000 items. Every error is InvalidArgument with Python's wording where
// there is one ("unsupported operand type(s) for +: 'int' and 'str'"); the interpreter adds the
// line. Stateless and thread-safe.
#pragma once

#include <ctime>
#include <functional>
#include <string>

#include "absl/status/statusor.h"
#include "tokenizer/jinja/value.h"

namespace tandem::jinja {

// +, -, *, /, //, %, ** and ~ (string concatenation).
absl::StatusOr<Value> BinaryOp(const std::string& op, const Value& a, const Value& b);
// ==, !=, <, <=, >, >=, in, notin.
absl::StatusOr<bool> CompareOp(const std::string& op, const Value& a, const Value& b);
absl::StatusOr<Value> Negate(const Value& a);

// obj.name: a method of a str, dict or list, else the dict's or namespace's item; undefined when
// neither. An undefined `obj` is an error naming it.
absl::StatusOr<Value> GetAttribute(const Value& object, const std::string& name);
// obj[key]: an item (negative indices count from the end), else for a string key the attribute.
absl::StatusOr<Value> GetItem(const Value& object, const Value& key);
// obj[start:stop:step] of a list, tuple or string; null parts are left out.
absl::StatusOr<Value> GetSlice(const Value& object, const Value* start, const Value* stop,
                               const Value* step);

// Iteration as Python's for: a list's items, a dict's keys, a string's characters; undefined is
// empty; anything else is an error.
absl::StatusOr<List> Iterate(const Value& value);

// A filter by name; `args` excludes the value. InvalidArgument "no filter named 'x'".
absl::StatusOr<Value> ApplyFilter(const std::string& name, const Value& value, CallArgs& args);
// A test by name; `args` excludes the value. InvalidArgument "no test named 'x'".
absl::StatusOr<bool> ApplyTest(const std::string& name, const Value& value, CallArgs& args);

// The globals of a render; `now` gives strftime_now its time.
Dict Globals(std::function<std::time_t()> now);

// Python's str.strip(chars) and its one-sided forms; chars null strips whitespace.
std::string Strip(const std::string& s, const std::string* chars, bool left, bool right);

}  // namespace tandem::jinja
