// The filters (builtins.h), as jinja2 3.1 defines them, with Hugging Face's tojson; the tests and
// globals are tests_and_globals.cc's.
#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/status_macros.h"
#include "tokenizer/jinja/bind.h"
#include "tokenizer/jinja/builtins.h"
#include "tokenizer/jinja/methods.h"

namespace tandem::jinja {
namespace {

absl::StatusOr<int64_t> Length(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined:
      return 0;
    case Value::Kind::kString:
      return static_cast<int64_t>(Decode(v.string()).size());
    case Value::Kind::kList:
      return static_cast<int64_t>(v.list().size());
    case Value::Kind::kDict:
    case Value::Kind::kNamespace:
      return static_cast<int64_t>(v.dict().items.size());
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("object of type '", v.TypeName(), "' has no len()"));
  }
}

// The attribute path "a.b" or "0" of an item, as jinja2's make_attrgetter.
absl::StatusOr<Value> Attribute(const Value& item, const Value& path) {
  if (path.is_integer()) return GetItem(item, path);
  Value out = item;
  const std::string text = path.Str();
  size_t begin = 0;
  while (true) {
    const size_t dot = text.find('.', begin);
    const std::string part =
        text.substr(begin, dot == std::string::npos ? std::string::npos : dot - begin);
    const bool digits = !part.empty() && std::all_of(part.begin(), part.end(), ::isdigit);
    ASSIGN_OR_RETURN(out, digits ? GetItem(out, Value::Int(std::atoll(part.c_str())))
                                 : GetItem(out, Value::String(part)));
    if (dot == std::string::npos) return out;
    begin = dot + 1;
  }
}

// A sort key that ignores case for strings unless case_sensitive.
Value SortKey(const Value& v, bool case_sensitive) {
  if (!case_sensitive && v.is_string()) return Value::String(Lower(v.string()));
  return v;
}

absl::StatusOr<List> Sorted(List items, bool reverse, bool case_sensitive, const Value& attribute) {
  std::vector<std::pair<Value, Value>> keyed;
  for (Value& item : items) {
    Value key = item;
    if (!attribute.is_undefined() && !attribute.is_none()) {
      ASSIGN_OR_RETURN(key, Attribute(item, attribute));
    }
    keyed.emplace_back(SortKey(key, case_sensitive), std::move(item));
  }
  absl::Status status;
  std::stable_sort(keyed.begin(), keyed.end(), [&](const auto& a, const auto& b) {
    absl::StatusOr<bool> less = reverse ? Less(b.first, a.first) : Less(a.first, b.first);
    if (!less.ok()) {
      status = less.status();
      return false;
    }
    return *less;
  });
  RETURN_IF_ERROR(status);
  List out;
  for (auto& [key, item] : keyed) out.push_back(std::move(item));
  return out;
}

std::string Replace(const std::string& s, const std::string& from, const std::string& to,
                    int64_t count) {
  std::string out;
  int64_t done = 0;
  if (from.empty()) {
    const std::vector<size_t> offsets = CodePointOffsets(s);
    for (size_t i = 0; i + 1 < offsets.size(); ++i) {
      if (count < 0 || done < count) {
        out += to;
        ++done;
      }
      out += s.substr(offsets[i], offsets[i + 1] - offsets[i]);
    }
    if (count < 0 || done < count) out += to;
    return out;
  }
  size_t begin = 0;
  for (size_t at = s.find(from); at != std::string::npos && (count < 0 || done < count);
       at = s.find(from, begin)) {
    out += s.substr(begin, at - begin);
    out += to;
    begin = at + from.size();
    ++done;
  }
  return out + s.substr(begin);
}

std::string EscapeNonAscii(const std::string& json) {
  std::string out;
  for (char32_t cp : Decode(json)) {
    if (cp < 0x80) {
      out += static_cast<char>(cp);
    } else if (cp < 0x10000) {
      out += absl::StrFormat("\\u%04x", static_cast<unsigned>(cp));
    } else {
      const char32_t v = cp - 0x10000;
      out += absl::StrFormat("\\u%04x\\u%04x", static_cast<unsigned>(0xd800 + (v >> 10)),
                             static_cast<unsigned>(0xdc00 + (v & 0x3ff)));
    }
  }
  return out;
}

absl::StatusOr<Value> ToJson(const Value& value, CallArgs& args) {
  ASSIGN_OR_RETURN(std::vector<Value> a,
                   Bind(args, "tojson", {"ensure_ascii", "indent", "separators", "sort_keys"}));
  int indent = -1;
  if (a[1].is_integer()) indent = static_cast<int>(std::clamp<int64_t>(a[1].integer(), 0, 64));
  std::string item_separator = indent >= 0 ? "," : ", ";
  std::string key_separator = ": ";
  if (a[2].is_list() && a[2].list().size() == 2 && a[2].list()[0].is_string() &&
      a[2].list()[1].is_string()) {
    item_separator = a[2].list()[0].string();
    key_separator = a[2].list()[1].string();
  }
  ASSIGN_OR_RETURN(std::string json,
                   value.ToJson(indent, item_separator, key_separator, a[3].Truthy()));
  return Value::String(a[0].Truthy() ? EscapeNonAscii(json) : json);
}

// jinja2's do_title: each run after "-", whitespace or an opening bracket starts a word.
std::string JinjaTitle(const std::string& s) {
  std::string out;
  bool word_start = true;
  for (char c : s) {
    const bool separator = c == '-' || c == '(' || c == '{' || c == '[' || c == '<' ||
                           std::isspace(static_cast<unsigned char>(c));
    if (separator) {
      out += c;
      word_start = true;
    } else {
      out += static_cast<char>(word_start ? std::toupper(static_cast<unsigned char>(c))
                                          : std::tolower(static_cast<unsigned char>(c)));
      word_start = false;
    }
  }
  return out;
}

std::string Indent(std::string s, const Value& width, bool first, bool blank) {
  const std::string indentation =
      width.is_string() ? width.string()
                        : std::string(static_cast<size_t>(std::clamp<int64_t>(
                                          width.is_integer() ? width.integer() : 4, 0, 256)),
                                      ' ');
  s += "\n";
  std::vector<std::string> lines;
  size_t begin = 0;
  for (size_t at = s.find('\n'); at != std::string::npos; at = s.find('\n', begin)) {
    lines.push_back(s.substr(begin, at - begin));
    begin = at + 1;
  }
  std::string out;
  if (blank) {
    for (size_t i = 0; i < lines.size(); ++i)
      absl::StrAppend(&out, i ? "\n" + indentation : "", lines[i]);
  } else {
    out = lines[0];
    for (size_t i = 1; i < lines.size(); ++i)
      absl::StrAppend(&out, "\n", lines[i].empty() ? "" : indentation, lines[i]);
  }
  return first ? indentation + out : out;
}

// select, reject, selectattr, rejectattr.
absl::StatusOr<Value> Select(const Value& value, CallArgs& args, bool attribute, bool keep) {
  ASSIGN_OR_RETURN(List items, Iterate(value));
  size_t next = 0;
  Value path;
  if (attribute) {
    if (args.positional.empty())
      return absl::InvalidArgumentError("selectattr/rejectattr need an attribute");
    path = args.positional[next++];
  }
  std::string test;
  if (next < args.positional.size()) {
    if (!args.positional[next].is_string())
      return absl::InvalidArgumentError("a test's name must be a string");
    test = args.positional[next++].string();
  }
  CallArgs test_args;
  test_args.positional.assign(args.positional.begin() + static_cast<ptrdiff_t>(next),
                              args.positional.end());
  test_args.keyword = args.keyword;
  List out;
  for (const Value& item : items) {
    Value subject = item;
    if (attribute) {
      ASSIGN_OR_RETURN(subject, Attribute(item, path));
    }
    bool pass = subject.Truthy();
    if (!test.empty()) {
      CallArgs copy = test_args;
      ASSIGN_OR_RETURN(pass, ApplyTest(test, subject, copy));
    }
    if (pass == keep) out.push_back(item);
  }
  return Value::MakeList(std::move(out));
}

absl::StatusOr<Value> Map(const Value& value, CallArgs& args) {
  ASSIGN_OR_RETURN(List items, Iterate(value));
  List out;
  for (const auto& [key, v] : args.keyword) {
    if (key != "attribute" && key != "default") {
      return absl::InvalidArgumentError(
          absl::StrCat("map() got an unexpected keyword argument '", key, "'"));
    }
  }
  const Value* attribute = nullptr;
  const Value* fallback = nullptr;
  for (const auto& [key, v] : args.keyword) (key == "attribute" ? attribute : fallback) = &v;
  if (attribute) {
    for (const Value& item : items) {
      ASSIGN_OR_RETURN(Value v, Attribute(item, *attribute));
      out.push_back(v.is_undefined() && fallback ? *fallback : v);
    }
    return Value::MakeList(std::move(out));
  }
  if (args.positional.empty() || !args.positional[0].is_string()) {
    return absl::InvalidArgumentError("map() needs a filter's name or attribute=");
  }
  for (const Value& item : items) {
    CallArgs rest{{args.positional.begin() + 1, args.positional.end()}, {}};
    ASSIGN_OR_RETURN(Value v, ApplyFilter(args.positional[0].string(), item, rest));
    out.push_back(std::move(v));
  }
  return Value::MakeList(std::move(out));
}

absl::StatusOr<Value> MinMax(const Value& value, CallArgs& args, bool max) {
  ASSIGN_OR_RETURN(std::vector<Value> a,
                   Bind(args, max ? "max" : "min", {"case_sensitive", "attribute"}));
  ASSIGN_OR_RETURN(List items, Iterate(value));
  if (items.empty())
    return Value::Undefined(absl::StrCat("No aggregated item, sequence was empty."));
  ASSIGN_OR_RETURN(List sorted, Sorted(std::move(items), max, a[0].Truthy(), a[1]));
  return sorted.front();
}

}  // namespace

absl::StatusOr<Value> ApplyFilter(const std::string& name, const Value& value, CallArgs& args) {
  if (name == "default" || name == "d") {
    ASSIGN_OR_RETURN(std::vector<Value> a, Bind(args, name, {"default_value", "boolean"}));
    const bool use_default = value.is_undefined() || (a[1].Truthy() && !value.Truthy());
    if (!use_default) return value;
    return a[0].is_undefined() ? Value::String("") : a[0];
  }
  if (name == "length" || name == "count") {
    ASSIGN_OR_RETURN(int64_t n, Length(value));
    return Value::Int(n);
  }
  if (name == "first" || name == "last") {
    ASSIGN_OR_RETURN(List items, Iterate(value));
    if (items.empty())
      return Value::Undefined(absl::StrCat("No ", name, " item, sequence was empty."));
    return name == "first" ? items.front() : items.back();
  }
  if (name == "join") {
    ASSIGN_OR_RETURN(std::vector<Value> a, Bind(args, name, {"d", "attribute"}));
    ASSIGN_OR_RETURN(List items, Iterate(value));
    std::string out;
    for (size_t i = 0; i < items.size(); ++i) {
      Value item = items[i];
      if (!a[1].is_undefined() && !a[1].is_none()) {
        ASSIGN_OR_RETURN(item, Attribute(item, a[1]));
      }
      absl::StrAppend(&out, i ? a[0].Str() : "", item.Str());
    }
    return Value::String(std::move(out));
  }
  if (name == "upper") return Value::String(Upper(value.Str()));
  if (name == "lower") return Value::String(Lower(value.Str()));
  if (name == "capitalize") return Value::String(Capitalize(value.Str()));
  if (name == "title") return Value::String(JinjaTitle(value.Str()));
  if (name == "trim") {
    ASSIGN_OR_RETURN(std::vector<Value> a, Bind(args, name, {"chars"}));
    return Value::String(
        Strip(value.Str(), a[0].is_string() ? &a[0].string() : nullptr, true, true));
  }
  if (name == "replace") {
    ASSIGN_OR_RETURN(std::vector<Value> a, Bind(args, name, {"old", "new", "count"}));
    return Value::String(
        Replace(value.Str(), a[0].Str(), a[1].Str(), a[2].is_integer() ? a[2].integer() : -1));
  }
  if (name == "list") {
    ASSIGN_OR_RETURN(List items, Iterate(value));
    return Value::MakeList(std::move(items));
  }
  if (name == "string") return Value::String(value.Str());
  if (name == "safe" || name == "e" || name == "escape" || name == "forceescape") {
    if (name == "safe") return value.is_undefined() ? Value::String("") : value;
    std::string out;
    for (char c : value.Str()) {
      switch (c) {
        case '&':
          out += "&amp;";
          break;
        case '<':
          out += "&lt;";
          break;
        case '>':
          out += "&gt;";
          break;
        case '"':
          out += "&#34;";
          break;
        case '\'':
          out += "&#39;";
          break;
        default:
          out += c;
      }
    }
    return Value::String(std::move(out));
  }
  if (name == "int") {
    ASSIGN_OR_RETURN(std::vector<Value> a, Bind(args, name, {"default", "base"}));
    const Value fallback = a[0].is_undefined() ? Value::Int(0) : a[0];
    if (value.is_integer()) return Value::Int(value.integer());
    if (value.kind() == Value::Kind::kFloat) {
      if (!std::isfinite(value.number()) || std::fabs(value.number()) >= 9.2e18) return fallback;
      return Value::Int(static_cast<int64_t>(value.number()));
    }
    if (value.is_string()) {
      const std::string text = Strip(value.string(), nullptr, true, true);
      char* end = nullptr;
      errno = 0;
      const long long parsed = std::strtoll(
          text.c_str(), &end, a[1].is_integer() ? static_cast<int>(a[1].integer()) : 10);
      if (!text.empty() && end && *end == 0 && errno == 0) return Value::Int(parsed);
      const double real = std::strtod(text.c_str(), &end);
      if (!text.empty() && end && *end == 0 && std::isfinite(real) && std::fabs(real) < 9.2e18) {
        return Value::Int(static_cast<int64_t>(real));
      }
    }
    return fallback;
  }
  if (name == "float") {
    ASSIGN_OR_RETURN(std::vector<Value> a, Bind(args, name, {"default"}));
    if (value.is_number()) return Value::Float(value.number());
    if (value.is_string()) {
      const std::string text = Strip(value.string(), nullptr, true, true);
      char* end = nullptr;
      const double real = std::strtod(text.c_str(), &end);
      if (!text.empty() && end && *end == 0) return Value::Float(real);
    }
    return a[0].is_undefined() ? Value::Float(0.0) : a[0];
  }
  if (name == "abs") {
    if (value.is_integer()) {
      if (value.integer() == INT64_MIN)
        return absl::InvalidArgumentError("integer overflow (past 64 bits)");
      return Value::Int(std::llabs(value.integer()));
    }
    if (value.is_number()) return Value::Float(std::fabs(value.number()));
    return absl::InvalidArgumentError(
        absl::StrCat("bad operand type for abs(): '", value.TypeName(), "'"));
  }
  if (name == "round") {
    ASSIGN_OR_RETURN(std::vector<Value> a, Bind(args, name, {"precision", "method"}));
    if (!value.is_number()) return absl::InvalidArgumentError("round: not a number");
    const int precision =
        static_cast<int>(std::clamp<int64_t>(a[0].is_integer() ? a[0].integer() : 0, -20, 20));
    const std::string method = a[1].is_string() ? a[1].string() : "common";
    const double scale = std::pow(10.0, precision);
    const double x = value.number() * scale;
    const double r = method == "ceil"    ? std::ceil(x)
                     : method == "floor" ? std::floor(x)
                                         : std::nearbyint(x);
    return Value::Float(r / scale);
  }
  if (name == "items") {
    if (value.is_undefined()) return Value::MakeList({});
    if (!value.is_dict()) return absl::InvalidArgumentError("items: not a mapping");
    CallArgs none;
    return (*BoundMethod(value, "items")).callable().call(none);
  }
  if (name == "dictsort") {
    ASSIGN_OR_RETURN(std::vector<Value> a, Bind(args, name, {"case_sensitive", "by", "reverse"}));
    if (!value.is_dict()) return absl::InvalidArgumentError("dictsort: not a mapping");
    CallArgs none;
    ASSIGN_OR_RETURN(Value items, (*BoundMethod(value, "items")).callable().call(none));
    const bool by_value = a[1].is_string() && a[1].string() == "value";
    ASSIGN_OR_RETURN(List sorted, Sorted(items.list(), a[2].Truthy(), a[0].Truthy(),
                                         Value::Int(by_value ? 1 : 0)));
    return Value::MakeList(std::move(sorted));
  }
  if (name == "sort") {
    ASSIGN_OR_RETURN(std::vector<Value> a,
                     Bind(args, name, {"reverse", "case_sensitive", "attribute"}));
    ASSIGN_OR_RETURN(List items, Iterate(value));
    ASSIGN_OR_RETURN(List sorted, Sorted(std::move(items), a[0].Truthy(), a[1].Truthy(), a[2]));
    return Value::MakeList(std::move(sorted));
  }
  if (name == "unique") {
    ASSIGN_OR_RETURN(std::vector<Value> a, Bind(args, name, {"case_sensitive", "attribute"}));
    ASSIGN_OR_RETURN(List items, Iterate(value));
    List out;
    List seen;
    for (const Value& item : items) {
      Value key = item;
      if (!a[1].is_undefined() && !a[1].is_none()) {
        ASSIGN_OR_RETURN(key, Attribute(item, a[1]));
      }
      key = SortKey(key, a[0].Truthy());
      if (std::any_of(seen.begin(), seen.end(), [&](const Value& s) { return Equal(s, key); }))
        continue;
      seen.push_back(key);
      out.push_back(item);
    }
    return Value::MakeList(std::move(out));
  }
  if (name == "reverse") {
    if (value.is_string()) {
      std::vector<char32_t> cps = Decode(value.string());
      std::string out;
      for (auto it = cps.rbegin(); it != cps.rend(); ++it) out += Encode(*it);
      return Value::String(std::move(out));
    }
    ASSIGN_OR_RETURN(List items, Iterate(value));
    std::reverse(items.begin(), items.end());
    return Value::MakeList(std::move(items));
  }
  if (name == "map") return Map(value, args);
  if (name == "select" || name == "reject") return Select(value, args, false, name == "select");
  if (name == "selectattr" || name == "rejectattr")
    return Select(value, args, true, name == "selectattr");
  if (name == "tojson") return ToJson(value, args);
  if (name == "indent") {
    ASSIGN_OR_RETURN(std::vector<Value> a, Bind(args, name, {"width", "first", "blank"}));
    return Value::String(Indent(value.Str(), a[0], a[1].Truthy(), a[2].Truthy()));
  }
  if (name == "sum") {
    ASSIGN_OR_RETURN(std::vector<Value> a, Bind(args, name, {"attribute", "start"}));
    ASSIGN_OR_RETURN(List items, Iterate(value));
    Value total = a[1].is_undefined() ? Value::Int(0) : a[1];
    for (const Value& item : items) {
      Value v = item;
      if (!a[0].is_undefined() && !a[0].is_none()) {
        ASSIGN_OR_RETURN(v, Attribute(item, a[0]));
      }
      ASSIGN_OR_RETURN(total, BinaryOp("+", total, v));
    }
    return total;
  }
  if (name == "min" || name == "max") return MinMax(value, args, name == "max");
  if (name == "attr") {
    ASSIGN_OR_RETURN(std::vector<Value> a, Bind(args, name, {"name"}));
    return GetAttribute(value, a[0].Str());
  }
  if (name == "wordcount")
    return Value::Int(static_cast<int64_t>(Split(value.Str(), nullptr, -1).size()));
  return absl::InvalidArgumentError(absl::StrCat("no filter named '", name, "'"));
}

}  // namespace tandem::jinja
