// The tests (`x is defined`) and the globals (builtins.h), as jinja2 3.1 and transformers define
// them; the filters are filters.cc's.
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <ctime>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/status_macros.h"
#include "tokenizer/jinja/bind.h"
#include "tokenizer/jinja/builtins.h"
#include "tokenizer/jinja/methods.h"

namespace tandem::jinja {
namespace {

// jinja2's sandbox refuses ranges longer than this (MAX_RANGE).
constexpr int64_t kMaxRange = 100000;

}  // namespace

absl::StatusOr<bool> ApplyTest(const std::string& name, const Value& value, CallArgs& args) {
  using Kind = Value::Kind;
  if (name == "defined") return !value.is_undefined();
  if (name == "undefined") return value.is_undefined();
  if (name == "none") return value.is_none();
  if (name == "boolean") return value.kind() == Kind::kBool;
  if (name == "true") return value.kind() == Kind::kBool && value.boolean();
  if (name == "false") return value.kind() == Kind::kBool && !value.boolean();
  if (name == "integer") return value.kind() == Kind::kInt;
  if (name == "float") return value.kind() == Kind::kFloat;
  if (name == "number") return value.is_number();
  if (name == "string") return value.is_string();
  if (name == "mapping") return value.is_dict();
  if (name == "iterable")
    return value.is_undefined() || value.is_string() || value.is_list() || value.is_dict();
  if (name == "sequence") return value.is_string() || value.is_list() || value.is_dict();
  if (name == "callable") return value.is_callable();
  if (name == "escaped") return false;
  if (name == "lower") return value.is_string() && Lower(value.string()) == value.string();
  if (name == "upper") return value.is_string() && Upper(value.string()) == value.string();
  if (name == "odd" || name == "even") {
    if (!value.is_integer())
      return absl::InvalidArgumentError(absl::StrCat("'", name, "' needs an integer"));
    return (value.integer() % 2 != 0) == (name == "odd");
  }
  ASSIGN_OR_RETURN(std::vector<Value> a, Bind(args, name, {"other"}));
  const Value& other = a[0];
  if (name == "divisibleby") {
    if (!value.is_integer() || !other.is_integer() || other.integer() == 0) {
      return absl::InvalidArgumentError("'divisibleby' needs integers and a divisor that is not 0");
    }
    return value.integer() % other.integer() == 0;
  }
  if (name == "sameas") {
    if (value.kind() != other.kind()) return false;
    if (value.is_none() || value.kind() == Kind::kBool) return Equal(value, other);
    if (value.is_list()) return &value.list() == &other.list();
    if (value.is_dict() || value.is_namespace()) return &value.dict() == &other.dict();
    return false;
  }
  if (name == "in") return CompareOp("in", value, other);
  if (name == "eq" || name == "equalto" || name == "==") return CompareOp("==", value, other);
  if (name == "ne" || name == "!=") return CompareOp("!=", value, other);
  if (name == "lt" || name == "lessthan" || name == "<") return CompareOp("<", value, other);
  if (name == "le" || name == "<=") return CompareOp("<=", value, other);
  if (name == "gt" || name == "greaterthan" || name == ">") return CompareOp(">", value, other);
  if (name == "ge" || name == ">=") return CompareOp(">=", value, other);
  return absl::InvalidArgumentError(absl::StrCat("no test named '", name, "'"));
}

Dict Globals(std::function<std::time_t()> now) {
  Dict globals;
  globals.Set(
      "range", Value::MakeCallable("range", [](CallArgs& args) -> absl::StatusOr<Value> {
        if (!args.keyword.empty() || args.positional.empty() || args.positional.size() > 3) {
          return absl::InvalidArgumentError("range() takes 1 to 3 positional arguments");
        }
        for (const Value& v : args.positional) {
          if (!v.is_integer()) {
            return absl::InvalidArgumentError(
                absl::StrCat("'", v.TypeName(), "' object cannot be interpreted as an integer"));
          }
        }
        const auto& p = args.positional;
        const int64_t start = p.size() == 1 ? 0 : p[0].integer();
        const int64_t stop = p.size() == 1 ? p[0].integer() : p[1].integer();
        const int64_t step = p.size() == 3 ? p[2].integer() : 1;
        if (step == 0) return absl::InvalidArgumentError("range() arg 3 must not be zero");
        const long double span = static_cast<long double>(stop) - static_cast<long double>(start);
        const long double count =
            std::max<long double>(0, std::ceil(span / static_cast<long double>(step)));
        if (count > kMaxRange) {
          return absl::InvalidArgumentError(
              absl::StrCat("range too big: the sandbox refuses ranges past ", kMaxRange, " items"));
        }
        List out;
        for (int64_t i = 0; i < static_cast<int64_t>(count); ++i)
          out.push_back(Value::Int(start + i * step));
        return Value::MakeList(std::move(out));
      }));
  const auto make_dict = [](CallArgs& args, const char* name) -> absl::StatusOr<Dict> {
    Dict dict;
    if (args.positional.size() > 1)
      return absl::InvalidArgumentError(absl::StrCat(name, "() takes at most one mapping"));
    if (!args.positional.empty()) {
      if (!args.positional[0].is_dict())
        return absl::InvalidArgumentError(absl::StrCat(name, "() takes a mapping"));
      dict = args.positional[0].dict();
    }
    for (const auto& [key, value] : args.keyword) {
      if (!key.empty() && key[0] == '_') {
        return absl::InvalidArgumentError(
            absl::StrCat(name, "(): attribute '", key, "' starts with an underscore"));
      }
      dict.Set(key, value);
    }
    return dict;
  };
  globals.Set("namespace", Value::MakeCallable(
                               "namespace", [make_dict](CallArgs& args) -> absl::StatusOr<Value> {
                                 ASSIGN_OR_RETURN(Dict dict, make_dict(args, "namespace"));
                                 return Value::MakeNamespace(std::move(dict));
                               }));
  globals.Set("dict",
              Value::MakeCallable("dict", [make_dict](CallArgs& args) -> absl::StatusOr<Value> {
                ASSIGN_OR_RETURN(Dict dict, make_dict(args, "dict"));
                return Value::MakeDict(std::move(dict));
              }));
  globals.Set("raise_exception",
              Value::MakeCallable("raise_exception", [](CallArgs& args) -> absl::StatusOr<Value> {
                ASSIGN_OR_RETURN(std::vector<Value> a, Bind(args, "raise_exception", {"message"}));
                return absl::FailedPreconditionError(a[0].Str());
              }));
  globals.Set("strftime_now",
              Value::MakeCallable("strftime_now", [now](CallArgs& args) -> absl::StatusOr<Value> {
                ASSIGN_OR_RETURN(std::vector<Value> a, Bind(args, "strftime_now", {"format"}));
                const std::time_t t = now();
                std::tm local{};
                localtime_r(&t, &local);
                char buffer[256];
                const size_t n = std::strftime(buffer, sizeof(buffer), a[0].Str().c_str(), &local);
                return Value::String(std::string(buffer, n));
              }));
  return globals;
}

}  // namespace tandem::jinja
