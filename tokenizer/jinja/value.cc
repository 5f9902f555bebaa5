#include "tokenizer/jinja/value.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/status_macros.h"

namespace tandem::jinja {

const Value* Dict::Find(std::string_view key) const {
  for (const auto& [k, v] : items) {
    if (k == key) return &v;
  }
  return nullptr;
}

void Dict::Set(const std::string& key, Value value) {
  for (auto& [k, v] : items) {
    if (k == key) {
      v = std::move(value);
      return;
    }
  }
  items.emplace_back(key, std::move(value));
}

Value Value::Undefined(std::string name) {
  Value v;
  v.s_ = std::move(name);
  return v;
}

Value Value::None() {
  Value v;
  v.kind_ = Kind::kNone;
  return v;
}

Value Value::Bool(bool b) {
  Value v;
  v.kind_ = Kind::kBool;
  v.b_ = b;
  return v;
}

Value Value::Int(int64_t i) {
  Value v;
  v.kind_ = Kind::kInt;
  v.i_ = i;
  return v;
}

Value Value::Float(double f) {
  Value v;
  v.kind_ = Kind::kFloat;
  v.f_ = f;
  return v;
}

Value Value::String(std::string s) {
  Value v;
  v.kind_ = Kind::kString;
  v.s_ = std::move(s);
  return v;
}

Value Value::MakeList(List items, bool tuple) {
  Value v;
  v.kind_ = Kind::kList;
  v.tuple_ = tuple;
  v.list_ = std::make_shared<List>(std::move(items));
  return v;
}

Value Value::MakeDict(Dict dict) {
  Value v;
  v.kind_ = Kind::kDict;
  v.dict_ = std::make_shared<Dict>(std::move(dict));
  return v;
}

Value Value::MakeNamespace(Dict attributes) {
  Value v = MakeDict(std::move(attributes));
  v.kind_ = Kind::kNamespace;
  return v;
}

Value Value::MakeCallable(std::string name, std::function<absl::StatusOr<Value>(CallArgs&)> call) {
  Value v;
  v.kind_ = Kind::kCallable;
  v.callable_ = std::make_shared<Callable>(Callable{std::move(name), std::move(call)});
  return v;
}

namespace {

template <typename Json>
Value ValueFromJson(const Json& json) {
  switch (json.type()) {
    case nlohmann::json::value_t::null:
      return Value::None();
    case nlohmann::json::value_t::boolean:
      return Value::Bool(json.template get<bool>());
    case nlohmann::json::value_t::number_integer:
      return Value::Int(json.template get<int64_t>());
    case nlohmann::json::value_t::number_unsigned: {
      const uint64_t u = json.template get<uint64_t>();
      return u > static_cast<uint64_t>(INT64_MAX) ? Value::Float(static_cast<double>(u))
                                                  : Value::Int(static_cast<int64_t>(u));
    }
    case nlohmann::json::value_t::number_float:
      return Value::Float(json.template get<double>());
    case nlohmann::json::value_t::string:
      return Value::String(json.template get<std::string>());
    case nlohmann::json::value_t::array: {
      List items;
      for (const auto& item : json) items.push_back(ValueFromJson(item));
      return Value::MakeList(std::move(items));
    }
    case nlohmann::json::value_t::object: {
      Dict dict;
      for (const auto& [key, item] : json.items())
        dict.items.emplace_back(key, ValueFromJson(item));
      return Value::MakeDict(std::move(dict));
    }
    default:
      return Value::None();
  }
}

}  // namespace

Value Value::FromJson(const nlohmann::json& json) { return ValueFromJson(json); }
Value Value::FromJson(const nlohmann::ordered_json& json) { return ValueFromJson(json); }

bool Value::Truthy() const {
  switch (kind_) {
    case Kind::kUndefined:
    case Kind::kNone:
      return false;
    case Kind::kBool:
      return b_;
    case Kind::kInt:
      return i_ != 0;
    case Kind::kFloat:
      return f_ != 0;
    case Kind::kString:
      return !s_.empty();
    case Kind::kList:
      return !list_->empty();
    case Kind::kDict:
      return !dict_->items.empty();
    case Kind::kNamespace:
    case Kind::kCallable:
      return true;
  }
  return false;
}

namespace {

std::string ReprString(const std::string& s) {
  const bool has_single = s.find('\'') != std::string::npos;
  const char quote = has_single && s.find('"') == std::string::npos ? '"' : '\'';
  std::string out(1, quote);
  for (char32_t cp : Decode(s)) {
    if (cp == '\\') {
      out += "\\\\";
    } else if (cp == static_cast<char32_t>(quote)) {
      out += '\\';
      out += quote;
    } else if (cp == '\n') {
      out += "\\n";
    } else if (cp == '\r') {
      out += "\\r";
    } else if (cp == '\t') {
      out += "\\t";
    } else if (cp < 0x20 || (cp >= 0x7f && cp <= 0xa0) || cp == 0xad) {
      out += absl::StrFormat("\\x%02x", static_cast<unsigned>(cp));
    } else if (cp == 0x2028 || cp == 0x2029) {
      out += absl::StrFormat("\\u%04x", static_cast<unsigned>(cp));
    } else {
      out += Encode(cp);
    }
  }
  out += quote;
  return out;
}

std::string JsonString(const std::string& s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\b':
        out += "\\b";
        break;
      case '\f':
        out += "\\f";
        break;
      default:
        if (c < 0x20) {
          out += absl::StrFormat("\\u%04x", c);
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  out += '"';
  return out;
}

}  // namespace

std::string FloatRepr(double f) {
  if (std::isnan(f)) return "nan";
  if (std::isinf(f)) return f > 0 ? "inf" : "-inf";
  if (f == 0) return std::signbit(f) ? "-0.0" : "0.0";
  char buffer[40];
  int precision = 0;
  for (; precision < 17; ++precision) {
    std::snprintf(buffer, sizeof(buffer), "%.*e", precision, f);
    if (std::strtod(buffer, nullptr) == f) break;
  }
  // buffer: [-]d[.ddd]e[+-]XX
  std::string text = buffer;
  const bool negative = text[0] == '-';
  if (negative) text.erase(0, 1);
  const size_t e = text.find('e');
  const int exponent = std::atoi(text.c_str() + e + 1);
  std::string digits = text.substr(0, e);
  digits.erase(std::remove(digits.begin(), digits.end(), '.'), digits.end());
  const int decimal_point = exponent + 1;  // digits before the point
  std::string out;
  if (decimal_point <= -4 || decimal_point > 16) {
    out = digits.substr(0, 1);
    if (digits.size() > 1) out += "." + digits.substr(1);
    out += absl::StrFormat("e%c%02d", exponent < 0 ? '-' : '+', std::abs(exponent));
  } else if (decimal_point <= 0) {
    out = "0." + std::string(-decimal_point, '0') + digits;
  } else if (static_cast<size_t>(decimal_point) >= digits.size()) {
    out = digits + std::string(decimal_point - digits.size(), '0') + ".0";
  } else {
    out = digits.substr(0, decimal_point) + "." + digits.substr(decimal_point);
  }
  return negative ? "-" + out : out;
}

std::string Value::Str() const {
  switch (kind_) {
    case Kind::kUndefined:
      return "";
    case Kind::kString:
      return s_;
    default:
      return Repr();
  }
}

std::string Value::Repr() const {
  switch (kind_) {
    case Kind::kUndefined:
      return "Undefined";
    case Kind::kNone:
      return "None";
    case Kind::kBool:
      return b_ ? "True" : "False";
    case Kind::kInt:
      return absl::StrCat(i_);
    case Kind::kFloat:
      return FloatRepr(f_);
    case Kind::kString:
      return ReprString(s_);
    case Kind::kList: {
      std::string out = tuple_ ? "(" : "[";
      for (size_t i = 0; i < list_->size(); ++i)
        absl::StrAppend(&out, i ? ", " : "", (*list_)[i].Repr());
      if (tuple_ && list_->size() == 1) out += ",";
      return out + (tuple_ ? ")" : "]");
    }
    case Kind::kDict:
    case Kind::kNamespace: {
      std::string out = kind_ == Kind::kNamespace ? "<Namespace {" : "{";
      bool first = true;
      for (const auto& [k, v] : dict_->items) {
        absl::StrAppend(&out, first ? "" : ", ", ReprString(k), ": ", v.Repr());
        first = false;
      }
      return out + (kind_ == Kind::kNamespace ? "}>" : "}");
    }
    case Kind::kCallable:
      return absl::StrCat("<function ", callable_->name, ">");
  }
  return "";
}

std::string Value::TypeName() const {
  switch (kind_) {
    case Kind::kUndefined:
      return "undefined";
    case Kind::kNone:
      return "NoneType";
    case Kind::kBool:
      return "bool";
    case Kind::kInt:
      return "int";
    case Kind::kFloat:
      return "float";
    case Kind::kString:
      return "str";
    case Kind::kList:
      return tuple_ ? "tuple" : "list";
    case Kind::kDict:
      return "dict";
    case Kind::kNamespace:
      return "Namespace";
    case Kind::kCallable:
      return "function";
  }
  return "";
}

absl::StatusOr<std::string> Value::ToJson(int indent, const std::string& item_separator,
                                          const std::string& key_separator, bool sort_keys) const {
  // The recursion carries the current depth for indentation.
  std::function<absl::StatusOr<std::string>(const Value&, int)> dump =
      [&](const Value& v, int depth) -> absl::StatusOr<std::string> {
    if (depth > 256) return absl::InvalidArgumentError("tojson: nesting deeper than 256");
    const std::string newline =
        indent >= 0 ? "\n" + std::string(static_cast<size_t>(indent) * (depth + 1), ' ') : "";
    const std::string close =
        indent >= 0 ? "\n" + std::string(static_cast<size_t>(indent) * depth, ' ') : "";
    switch (v.kind_) {
      case Kind::kNone:
        return std::string("null");
      case Kind::kBool:
        return std::string(v.b_ ? "true" : "false");
      case Kind::kInt:
        return absl::StrCat(v.i_);
      case Kind::kFloat:
        if (std::isnan(v.f_)) return std::string("NaN");
        if (std::isinf(v.f_)) return std::string(v.f_ > 0 ? "Infinity" : "-Infinity");
        return FloatRepr(v.f_);
      case Kind::kString:
        return JsonString(v.s_);
      case Kind::kList: {
        if (v.list_->empty()) return std::string("[]");
        std::string out = "[";
        for (size_t i = 0; i < v.list_->size(); ++i) {
          ASSIGN_OR_RETURN(std::string item, dump((*v.list_)[i], depth + 1));
          absl::StrAppend(&out, i ? item_separator : "", newline, item);
        }
        return out + close + "]";
      }
      case Kind::kDict:
      case Kind::kNamespace: {
        if (v.dict_->items.empty()) return std::string("{}");
        std::vector<const std::pair<std::string, Value>*> items;
        for (const auto& item : v.dict_->items) items.push_back(&item);
        if (sort_keys) {
          std::stable_sort(items.begin(), items.end(),
                           [](auto* a, auto* b) { return a->first < b->first; });
        }
        std::string out = "{";
        for (size_t i = 0; i < items.size(); ++i) {
          ASSIGN_OR_RETURN(std::string item, dump(items[i]->second, depth + 1));
          absl::StrAppend(&out, i ? item_separator : "", newline, JsonString(items[i]->first),
                          key_separator, item);
        }
        return out + close + "}";
      }
      default:
        return absl::InvalidArgumentError(
            absl::StrCat("tojson: a ", v.TypeName(), " is not JSON serializable"));
    }
  };
  return dump(*this, 0);
}

bool Equal(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.kind() == Value::Kind::kFloat || b.kind() == Value::Kind::kFloat)
      return a.number() == b.number();
    return a.integer() == b.integer();
  }
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case Value::Kind::kUndefined:
    case Value::Kind::kNone:
      return true;
    case Value::Kind::kString:
      return a.string() == b.string();
    case Value::Kind::kList: {
      if (a.is_tuple() != b.is_tuple() || a.list().size() != b.list().size()) return false;
      for (size_t i = 0; i < a.list().size(); ++i) {
        if (!Equal(a.list()[i], b.list()[i])) return false;
      }
      return true;
    }
    case Value::Kind::kDict: {
      if (a.dict().items.size() != b.dict().items.size()) return false;
      for (const auto& [k, v] : a.dict().items) {
        const Value* other = b.dict().Find(k);
        if (!other || !Equal(v, *other)) return false;
      }
      return true;
    }
    case Value::Kind::kNamespace:
      return &a.dict() == &b.dict();
    case Value::Kind::kCallable:
      return &a.callable() == &b.callable();
    default:
      return false;
  }
}

absl::StatusOr<bool> Less(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.kind() == Value::Kind::kFloat || b.kind() == Value::Kind::kFloat)
      return a.number() < b.number();
    return a.integer() < b.integer();
  }
  if (a.is_string() && b.is_string())
    return a.string() < b.string();  // UTF-8 order is code point order
  if (a.is_list() && b.is_list()) {
    const size_t n = std::min(a.list().size(), b.list().size());
    for (size_t i = 0; i < n; ++i) {
      if (Equal(a.list()[i], b.list()[i])) continue;
      return Less(a.list()[i], b.list()[i]);
    }
    return a.list().size() < b.list().size();
  }
  return absl::InvalidArgumentError(absl::StrCat("'<' is not supported between instances of '",
                                                 a.TypeName(), "' and '", b.TypeName(), "'"));
}

bool IsPythonSpace(char32_t cp) {
  return (cp >= 0x09 && cp <= 0x0d) || (cp >= 0x1c && cp <= 0x20) || cp == 0x85 || cp == 0xa0 ||
         cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200a) || cp == 0x2028 || cp == 0x2029 ||
         cp == 0x202f || cp == 0x205f || cp == 0x3000;
}

char32_t DecodeAt(std::string_view text, size_t at, size_t* length) {
  const unsigned char c = text[at];
  const size_t n = c < 0x80           ? 1
                   : (c >> 5) == 0x6  ? 2
                   : (c >> 4) == 0xe  ? 3
                   : (c >> 3) == 0x1e ? 4
                                      : 0;
  *length = 1;
  if (n <= 1 || at + n > text.size()) return c;
  char32_t cp = c & (0xff >> (n + 1));
  for (size_t k = 1; k < n; ++k) {
    const unsigned char next = text[at + k];
    if ((next & 0xc0) != 0x80) return c;
    cp = (cp << 6) | (next & 0x3f);
  }
  *length = n;
  return cp;
}

std::vector<char32_t> Decode(std::string_view text) {
  std::vector<char32_t> out;
  out.reserve(text.size());
  for (size_t i = 0, length = 0; i < text.size(); i += length)
    out.push_back(DecodeAt(text, i, &length));
  return out;
}

std::string Encode(char32_t cp) {
  std::string out;
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xc0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3f));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xe0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
    out += static_cast<char>(0x80 | (cp & 0x3f));
  } else {
    out += static_cast<char>(0xf0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3f));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
    out += static_cast<char>(0x80 | (cp & 0x3f));
  }
  return out;
}

std::vector<size_t> CodePointOffsets(std::string_view text) {
  std::vector<size_t> offsets;
  size_t i = 0;
  for (size_t length = 0; i < text.size(); i += length) {
    offsets.push_back(i);
    DecodeAt(text, i, &length);
  }
  offsets.push_back(text.size());
  return offsets;
}

}  // namespace tandem::jinja
