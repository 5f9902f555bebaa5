#include "tokenizer/jinja/methods.h"

#include <algorithm>
#include <cctype>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "tokenizer/jinja/bind.h"
#include "tokenizer/jinja/builtins.h"

namespace tandem::jinja {
namespace {

using Method = std::function<absl::StatusOr<Value>(const Value& self, CallArgs& args)>;

absl::Status TypeError(std::string_view method, std::string_view what, const Value& got) {
  return absl::InvalidArgumentError(
      absl::StrCat(std::string(method), "() ", std::string(what), ", not ", got.TypeName()));
}

absl::StatusOr<std::string> OptionalString(const Value& v, std::string_view method) {
  if (v.is_string()) return v.string();
  return TypeError(method, "argument must be str", v);
}

// startswith/endswith take a str or a tuple of them.
absl::StatusOr<Value> Affix(const Value& self, CallArgs& args, bool start) {
  const char* name = start ? "startswith" : "endswith";
  ASSIGN_OR_RETURN(std::vector<Value> a, Bind(args, name, {"prefix"}));
  std::vector<std::string> candidates;
  if (a[0].is_string()) {
    candidates.push_back(a[0].string());
  } else if (a[0].is_list()) {
    for (const Value& v : a[0].list()) {
      if (!v.is_string()) return TypeError(name, "arguments must be str", v);
      candidates.push_back(v.string());
    }
  } else {
    return TypeError(name, "first arg must be str or a tuple of str", a[0]);
  }
  for (const std::string& c : candidates) {
    if (start ? absl::StartsWith(self.string(), c) : absl::EndsWith(self.string(), c))
      return Value::Bool(true);
  }
  return Value::Bool(false);
}

absl::StatusOr<Value> Format(const Value& self, CallArgs& args) {
  std::string out;
  const std::string& s = self.string();
  size_t next = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '{' && i + 1 < s.size() && s[i + 1] == '{') {
      out += '{';
      ++i;
    } else if (s[i] == '}' && i + 1 < s.size() && s[i + 1] == '}') {
      out += '}';
      ++i;
    } else if (s[i] == '{') {
      const size_t close = s.find('}', i);
      if (close == std::string::npos)
        return absl::InvalidArgumentError("format(): single '{' encountered");
      const std::string field = s.substr(i + 1, close - i - 1);
      const Value* value = nullptr;
      if (field.empty()) {
        if (next < args.positional.size()) value = &args.positional[next++];
      } else if (std::all_of(field.begin(), field.end(),
                             [](char c) { return std::isdigit(static_cast<unsigned char>(c)); })) {
        const size_t index = std::stoul(field.substr(0, 9));
        if (index < args.positional.size()) value = &args.positional[index];
      } else {
        for (const auto& [k, v] : args.keyword) {
          if (k == field) value = &v;
        }
      }
      if (!value)
        return absl::InvalidArgumentError(absl::StrCat("format(): no argument for {", field, "}"));
      out += value->Str();
      i = close;
    } else if (s[i] == '}') {
      return absl::InvalidArgumentError("format(): single '}' encountered");
    } else {
      out += s[i];
    }
  }
  return Value::String(std::move(out));
}

absl::StatusOr<Value> Find(const Value& self, CallArgs& args, bool reverse, bool count) {
  ASSIGN_OR_RETURN(std::vector<Value> a, Bind(args,
                                              count     ? "count"
                                              : reverse ? "rfind"
                                                        : "find",
                                              {"sub"}));
  ASSIGN_OR_RETURN(std::string sub, OptionalString(a[0], "find"));
  const std::string& s = self.string();
  if (count) {
    if (sub.empty()) return Value::Int(static_cast<int64_t>(Decode(s).size()) + 1);
    int64_t n = 0;
    for (size_t at = s.find(sub); at != std::string::npos; at = s.find(sub, at + sub.size())) ++n;
    return Value::Int(n);
  }
  const size_t at = reverse ? s.rfind(sub) : s.find(sub);
  if (at == std::string::npos) return Value::Int(-1);
  return Value::Int(static_cast<int64_t>(Decode(s.substr(0, at)).size()));
}

bool AllChars(const std::string& s, int (*predicate)(int)) {
  if (s.empty()) return false;
  for (unsigned char c : s) {
    if (!predicate(c)) return false;
  }
  return true;
}

absl::StatusOr<Value> StringMethod(const std::string& name, const Value& self, CallArgs& args) {
  const std::string& s = self.string();
  if (name == "strip" || name == "lstrip" || name == "rstrip") {
    ASSIGN_OR_RETURN(std::vector<Value> a, Bind(args, name, {"chars"}));
    if (!a[0].is_undefined() && !a[0].is_none() && !a[0].is_string()) {
      return TypeError(name, "arg must be None or str", a[0]);
    }
    const std::string* chars = a[0].is_string() ? &a[0].string() : nullptr;
    return Value::String(Strip(s, chars, name != "rstrip", name != "lstrip"));
  }
  if (name == "split" || name == "rsplit") {
    ASSIGN_OR_RETURN(std::vector<Value> a, Bind(args, name, {"sep", "maxsplit"}));
    const std::string* sep = a[0].is_string() ? &a[0].string() : nullptr;
    if (sep && sep->empty()) return absl::InvalidArgumentError("empty separator");
    const int64_t maxsplit = a[1].is_integer() ? a[1].integer() : -1;
    List out;
    if (name == "rsplit" && maxsplit >= 0 && sep) {
      std::vector<std::string> parts;
      std::string rest = s;
      for (int64_t k = 0; k < maxsplit; ++k) {
        const size_t at = rest.rfind(*sep);
        if (at == std::string::npos) break;
        parts.insert(parts.begin(), rest.substr(at + sep->size()));
        rest = rest.substr(0, at);
      }
      parts.insert(parts.begin(), rest);
      for (auto& p : parts) out.push_back(Value::String(std::move(p)));
      return Value::MakeList(std::move(out));
    }
    for (auto& p : Split(s, sep, maxsplit)) out.push_back(Value::String(std::move(p)));
    return Value::MakeList(std::move(out));
  }
  if (name == "splitlines") {
    ASSIGN_OR_RETURN(std::vector<Value> a, Bind(args, name, {"keepends"}));
    List out;
    size_t begin = 0;
    for (size_t i = 0; i < s.size(); ++i) {
      if (s[i] != '\n' && s[i] != '\r') continue;
      size_t end = i;
      if (s[i] == '\r' && i + 1 < s.size() && s[i + 1] == '\n') ++i;
      out.push_back(Value::String(s.substr(begin, (a[0].Truthy() ? i + 1 : end) - begin)));
      begin = i + 1;
    }
    if (begin < s.size()) out.push_back(Value::String(s.substr(begin)));
    return Value::MakeList(std::move(out));
  }
  if (name == "startswith" || name == "endswith") return Affix(self, args, name == "startswith");
  if (name == "upper" || name == "lower" || name == "title" || name == "capitalize") {
    ASSIGN_OR_RETURN(std::vector<Value> a, Bind(args, name, {}));
    return Value::String(name == "upper"   ? Upper(s)
                         : name == "lower" ? Lower(s)
                         : name == "title" ? PythonTitle(s)
                                           : Capitalize(s));
  }
  if (name == "replace") {
    ASSIGN_OR_RETURN(std::vector<Value> a, Bind(args, name, {"old", "new", "count"}));
    ASSIGN_OR_RETURN(std::string from, OptionalString(a[0], name));
    ASSIGN_OR_RETURN(std::string to, OptionalString(a[1], name));
    CallArgs filter_args{{Value::String(from), Value::String(to)}, {}};
    if (!a[2].is_undefined()) filter_args.positional.push_back(a[2]);
    return ApplyFilter("replace", self, filter_args);
  }
  if (name == "find" || name == "rfind" || name == "count")
    return Find(self, args, name == "rfind", name == "count");
  if (name == "join") {
    ASSIGN_OR_RETURN(std::vector<Value> a, Bind(args, name, {"iterable"}));
    ASSIGN_OR_RETURN(List items, Iterate(a[0]));
    std::string out;
    for (size_t i = 0; i < items.size(); ++i) {
      if (!items[i].is_string()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "sequence item ", i, ": expected str instance, ", items[i].TypeName(), " found"));
      }
      absl::StrAppend(&out, i ? s : "", items[i].string());
    }
    return Value::String(std::move(out));
  }
  if (name == "removeprefix" || name == "removesuffix") {
    ASSIGN_OR_RETURN(std::vector<Value> a, Bind(args, name, {"affix"}));
    ASSIGN_OR_RETURN(std::string affix, OptionalString(a[0], name));
    if (name == "removeprefix" && absl::StartsWith(s, affix))
      return Value::String(s.substr(affix.size()));
    if (name == "removesuffix" && !affix.empty() && absl::EndsWith(s, affix)) {
      return Value::String(s.substr(0, s.size() - affix.size()));
    }
    return self;
  }
  if (name == "format") return Format(self, args);
  if (name == "isdigit") return Value::Bool(AllChars(s, isdigit));
  if (name == "isalpha") return Value::Bool(AllChars(s, isalpha));
  if (name == "isalnum") return Value::Bool(AllChars(s, isalnum));
  if (name == "isspace") return Value::Bool(AllChars(s, isspace));
  if (name == "islower") return Value::Bool(Lower(s) == s && Upper(s) != s);
  if (name == "isupper") return Value::Bool(Upper(s) == s && Lower(s) != s);
  return absl::InvalidArgumentError(absl::StrCat("'str' object has no attribute '", name, "'"));
}

absl::StatusOr<Value> DictMethod(const std::string& name, const Value& self, CallArgs& args) {
  if (name == "get") {
    ASSIGN_OR_RETURN(std::vector<Value> a, Bind(args, name, {"key", "default"}));
    if (a[0].is_string()) {
      if (const Value* item = self.dict().Find(a[0].string())) return *item;
    }
    return a[1].is_undefined() ? Value::None() : a[1];
  }
  ASSIGN_OR_RETURN(std::vector<Value> a, Bind(args, name, {}));
  List out;
  for (const auto& [k, v] : self.dict().items) {
    if (name == "keys") {
      out.push_back(Value::String(k));
    } else if (name == "values") {
      out.push_back(v);
    } else {
      out.push_back(Value::MakeList({Value::String(k), v}, /*tuple=*/true));
    }
  }
  return Value::MakeList(std::move(out));
}

absl::StatusOr<Value> ListMethod(const std::string& name, const Value& self, CallArgs& args) {
  ASSIGN_OR_RETURN(std::vector<Value> a, Bind(args, name, {"value"}));
  int64_t count = 0;
  for (size_t i = 0; i < self.list().size(); ++i) {
    if (!Equal(self.list()[i], a[0])) continue;
    if (name == "index") return Value::Int(static_cast<int64_t>(i));
    ++count;
  }
  if (name == "index")
    return absl::InvalidArgumentError(absl::StrCat(a[0].Repr(), " is not in list"));
  return Value::Int(count);
}

bool IsStringMethod(const std::string& name) {
  static const char* const kNames[] = {
      "strip",    "lstrip",  "rstrip",  "split",        "rsplit",       "splitlines", "startswith",
      "endswith", "upper",   "lower",   "title",        "capitalize",   "replace",    "find",
      "rfind",    "count",   "join",    "removeprefix", "removesuffix", "format",     "isdigit",
      "isalpha",  "isalnum", "isspace", "islower",      "isupper"};
  for (const char* n : kNames) {
    if (name == n) return true;
  }
  return false;
}

}  // namespace

std::optional<Value> BoundMethod(const Value& object, const std::string& name) {
  Method method;
  if (object.is_string() && IsStringMethod(name)) {
    method = [name](const Value& self, CallArgs& args) { return StringMethod(name, self, args); };
  } else if (object.is_dict() &&
             (name == "items" || name == "keys" || name == "values" || name == "get")) {
    method = [name](const Value& self, CallArgs& args) { return DictMethod(name, self, args); };
  } else if (object.is_list() && (name == "index" || name == "count")) {
    method = [name](const Value& self, CallArgs& args) { return ListMethod(name, self, args); };
  } else {
    return std::nullopt;
  }
  return Value::MakeCallable(absl::StrCat(object.TypeName(), ".", name),
                             [object, method](CallArgs& args) { return method(object, args); });
}

std::string Upper(std::string s) {
  for (char& c : s) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return s;
}

std::string Lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

std::string PythonTitle(const std::string& s) {
  std::string out = s;
  bool previous_cased = false;
  for (char& c : out) {
    const unsigned char u = static_cast<unsigned char>(c);
    if (std::isalpha(u)) {
      c = static_cast<char>(previous_cased ? std::tolower(u) : std::toupper(u));
      previous_cased = true;
    } else {
      previous_cased = false;
    }
  }
  return out;
}

std::string Capitalize(const std::string& s) {
  std::string out = Lower(s);
  if (!out.empty()) out[0] = static_cast<char>(std::toupper(static_cast<unsigned char>(out[0])));
  return out;
}

std::vector<std::string> Split(const std::string& s, const std::string* sep, int64_t maxsplit) {
  std::vector<std::string> out;
  if (sep) {
    size_t begin = 0;
    for (size_t at = s.find(*sep);
         at != std::string::npos && (maxsplit < 0 || static_cast<int64_t>(out.size()) < maxsplit);
         at = s.find(*sep, begin)) {
      out.push_back(s.substr(begin, at - begin));
      begin = at + sep->size();
    }
    out.push_back(s.substr(begin));
    return out;
  }
  const std::vector<char32_t> cps = Decode(s);
  const std::vector<size_t> offsets = CodePointOffsets(s);
  size_t i = 0;
  while (i < cps.size()) {
    while (i < cps.size() && IsPythonSpace(cps[i])) ++i;
    if (i == cps.size()) break;
    if (maxsplit >= 0 && static_cast<int64_t>(out.size()) == maxsplit) {
      out.push_back(s.substr(offsets[i]));  // the rest, trailing whitespace kept, as CPython does
      break;
    }
    const size_t begin = i;
    while (i < cps.size() && !IsPythonSpace(cps[i])) ++i;
    out.push_back(s.substr(offsets[begin], offsets[i] - offsets[begin]));
  }
  return out;
}

}  // namespace tandem::jinja
