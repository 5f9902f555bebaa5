// Operators, attribute and item access, slicing and iteration (builtins.h).
#include <cmath>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "tokenizer/jinja/builtins.h"
#include "tokenizer/jinja/methods.h"

namespace tandem::jinja {
namespace {

// Strings built by * are capped so that "x" * 10**12 fails instead of taking the host's memory.
constexpr size_t kMaxString = 64u << 20;

absl::Status UndefinedError(const Value& v) {
  return absl::InvalidArgumentError(v.string().empty() ? "a value is undefined" : v.string());
}

absl::Status Unsupported(const std::string& op, const Value& a, const Value& b) {
  return absl::InvalidArgumentError(absl::StrCat("unsupported operand type(s) for ", op, ": '",
                                                 a.TypeName(), "' and '", b.TypeName(), "'"));
}

absl::StatusOr<Value> Repeat(const Value& sequence, int64_t times) {
  if (times < 0) times = 0;
  if (sequence.is_string()) {
    if (!sequence.string().empty() &&
        static_cast<uint64_t>(times) > kMaxString / sequence.string().size()) {
      return absl::InvalidArgumentError("a repeated string past 64 MiB");
    }
    std::string out;
    for (int64_t i = 0; i < times; ++i) out += sequence.string();
    return Value::String(std::move(out));
  }
  if (!sequence.list().empty() &&
      static_cast<uint64_t>(times) > (1u << 20) / sequence.list().size()) {
    return absl::InvalidArgumentError("a repeated list past 1048576 items");
  }
  List out;
  for (int64_t i = 0; i < times; ++i)
    out.insert(out.end(), sequence.list().begin(), sequence.list().end());
  return Value::MakeList(std::move(out), sequence.is_tuple());
}

absl::StatusOr<Value> IntResult(bool overflow, int64_t value) {
  if (overflow) return absl::InvalidArgumentError("integer overflow (past 64 bits)");
  return Value::Int(value);
}

int64_t FloorDiv(int64_t a, int64_t b) {
  int64_t q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
  return q;
}

}  // namespace

absl::StatusOr<Value> BinaryOp(const std::string& op, const Value& a, const Value& b) {
  if (op == "~") {
    std::string out = a.Str() + b.Str();
    if (out.size() > kMaxString) return absl::InvalidArgumentError("a string past 64 MiB");
    return Value::String(std::move(out));
  }
  if (a.is_undefined()) return UndefinedError(a);
  if (b.is_undefined()) return UndefinedError(b);
  const bool ints = a.is_integer() && b.is_integer();
  const bool numbers = a.is_number() && b.is_number();
  if (op == "+") {
    if (ints) {
      int64_t r = 0;
      const bool overflow = __builtin_add_overflow(a.integer(), b.integer(), &r);
      return IntResult(overflow, r);
    }
    if (numbers) return Value::Float(a.number() + b.number());
    if (a.is_string() && b.is_string()) {
      if (a.string().size() + b.string().size() > kMaxString)
        return absl::InvalidArgumentError("a string past 64 MiB");
      return Value::String(a.string() + b.string());
    }
    if (a.is_list() && b.is_list() && a.is_tuple() == b.is_tuple()) {
      List out = a.list();
      out.insert(out.end(), b.list().begin(), b.list().end());
      return Value::MakeList(std::move(out), a.is_tuple());
    }
    if (a.is_string()) {
      return absl::InvalidArgumentError(
          absl::StrCat("can only concatenate str (not \"", b.TypeName(), "\") to str"));
    }
    return Unsupported(op, a, b);
  }
  if (op == "-") {
    if (ints) {
      int64_t r = 0;
      const bool overflow = __builtin_sub_overflow(a.integer(), b.integer(), &r);
      return IntResult(overflow, r);
    }
    if (numbers) return Value::Float(a.number() - b.number());
    return Unsupported(op, a, b);
  }
  if (op == "*") {
    if (ints) {
      int64_t r = 0;
      const bool overflow = __builtin_mul_overflow(a.integer(), b.integer(), &r);
      return IntResult(overflow, r);
    }
    if (numbers) return Value::Float(a.number() * b.number());
    if ((a.is_string() || a.is_list()) && b.is_integer()) return Repeat(a, b.integer());
    if ((b.is_string() || b.is_list()) && a.is_integer()) return Repeat(b, a.integer());
    return Unsupported(op, a, b);
  }
  if (!numbers) {
    if (op == "%" && a.is_string())
      return absl::InvalidArgumentError("string formatting with % is not supported");
    return Unsupported(op, a, b);
  }
  if (op == "/") {
    if (b.number() == 0) return absl::InvalidArgumentError("division by zero");
    return Value::Float(a.number() / b.number());
  }
  if (op == "//" || op == "%") {
    if (b.number() == 0)
      return absl::InvalidArgumentError(op == "//" ? "integer division or modulo by zero"
                                                   : "modulo by zero");
    if (ints) {
      if (a.integer() == INT64_MIN && b.integer() == -1)
        return absl::InvalidArgumentError("integer overflow (past 64 bits)");
      const int64_t q = FloorDiv(a.integer(), b.integer());
      return Value::Int(op == "//" ? q : a.integer() - q * b.integer());
    }
    const double q = std::floor(a.number() / b.number());
    if (op == "//") return Value::Float(q);
    double m = std::fmod(a.number(), b.number());
    if (m != 0 && ((m < 0) != (b.number() < 0))) m += b.number();
    return Value::Float(m);
  }
  if (op == "**") {
    if (ints && b.integer() >= 0) {
      int64_t result = 1;
      int64_t base = a.integer();
      for (int64_t e = b.integer(); e > 0; --e) {
        if (__builtin_mul_overflow(result, base, &result)) return IntResult(true, 0);
        if (result == 0 || result == 1) break;
      }
      return Value::Int(result);
    }
    if (a.number() == 0 && b.number() < 0)
      return absl::InvalidArgumentError("0.0 cannot be raised to a negative power");
    return Value::Float(std::pow(a.number(), b.number()));
  }
  return absl::InvalidArgumentError(absl::StrCat("unknown operator '", op, "'"));
}

absl::StatusOr<Value> Negate(const Value& a) {
  if (a.is_undefined()) return UndefinedError(a);
  if (a.is_integer()) {
    if (a.integer() == INT64_MIN)
      return absl::InvalidArgumentError("integer overflow (past 64 bits)");
    return Value::Int(-a.integer());
  }
  if (a.is_number()) return Value::Float(-a.number());
  return absl::InvalidArgumentError(
      absl::StrCat("bad operand type for unary -: '", a.TypeName(), "'"));
}

absl::StatusOr<bool> CompareOp(const std::string& op, const Value& a, const Value& b) {
  if (op == "==") return Equal(a, b);
  if (op == "!=") return !Equal(a, b);
  if (op == "in" || op == "notin") {
    bool found = false;
    if (b.is_string()) {
      if (!a.is_string()) {
        return absl::InvalidArgumentError(
            absl::StrCat("'in <string>' requires string as left operand, not ", a.TypeName()));
      }
      found = absl::StrContains(b.string(), a.string());
    } else if (b.is_list()) {
      for (const Value& item : b.list()) found = found || Equal(a, item);
    } else if (b.is_dict() || b.is_namespace()) {
      found = a.is_string() && b.dict().Find(a.string()) != nullptr;
    } else if (!b.is_undefined()) {
      return absl::InvalidArgumentError(
          absl::StrCat("argument of type '", b.TypeName(), "' is not iterable"));
    }
    return op == "in" ? found : !found;
  }
  if (a.is_undefined()) return UndefinedError(a);
  if (b.is_undefined()) return UndefinedError(b);
  absl::StatusOr<bool> result = (op == "<" || op == ">=") ? Less(a, b) : Less(b, a);
  if (!result.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("'", op,
                                                   "' is not supported between instances of '",
                                                   a.TypeName(), "' and '", b.TypeName(), "'"));
  }
  if (op == "<" || op == ">") return *result;
  if (op == ">=" || op == "<=") return !*result;
  return absl::InvalidArgumentError(absl::StrCat("unknown comparison '", op, "'"));
}

absl::StatusOr<Value> GetAttribute(const Value& object, const std::string& name) {
  if (object.is_undefined()) return UndefinedError(object);
  const std::string missing =
      absl::StrCat("'", object.TypeName(), " object' has no attribute '", name, "'");
  if (absl::StartsWith(name, "_")) return Value::Undefined(missing);
  if (std::optional<Value> method = BoundMethod(object, name)) return *method;
  if (object.is_dict() || object.is_namespace()) {
    if (const Value* item = object.dict().Find(name)) return *item;
  }
  return Value::Undefined(missing);
}

absl::StatusOr<Value> GetItem(const Value& object, const Value& key) {
  if (object.is_undefined()) return UndefinedError(object);
  if ((object.is_list() || object.is_string()) && key.is_integer()) {
    const std::vector<size_t> offsets =
        object.is_string() ? CodePointOffsets(object.string()) : std::vector<size_t>{};
    const int64_t size = object.is_list() ? static_cast<int64_t>(object.list().size())
                                          : static_cast<int64_t>(offsets.size()) - 1;
    int64_t index = key.integer();
    if (index < 0) index += size;
    if (index < 0 || index >= size) {
      return Value::Undefined(
          absl::StrCat("'", object.TypeName(), " object' has no element ", key.integer()));
    }
    if (object.is_list()) return object.list()[index];
    return Value::String(
        object.string().substr(offsets[index], offsets[index + 1] - offsets[index]));
  }
  if ((object.is_dict() || object.is_namespace()) && key.is_string()) {
    if (const Value* item = object.dict().Find(key.string())) return *item;
  }
  if (key.is_string()) return GetAttribute(object, key.string());
  return Value::Undefined(
      absl::StrCat("'", object.TypeName(), " object' has no element ", key.Repr()));
}

absl::StatusOr<Value> GetSlice(const Value& object, const Value* start, const Value* stop,
                               const Value* step) {
  if (object.is_undefined()) return UndefinedError(object);
  if (!object.is_list() && !object.is_string()) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", object.TypeName(), "' object is not subscriptable"));
  }
  for (const Value* part : {start, stop, step}) {
    if (part && !part->is_none() && !part->is_integer()) {
      return absl::InvalidArgumentError("slice indices must be integers or None");
    }
  }
  const std::vector<size_t> offsets =
      object.is_string() ? CodePointOffsets(object.string()) : std::vector<size_t>{};
  const int64_t size = object.is_list() ? static_cast<int64_t>(object.list().size())
                                        : static_cast<int64_t>(offsets.size()) - 1;
  const int64_t s = step && step->is_integer() ? step->integer() : 1;
  if (s == 0) return absl::InvalidArgumentError("slice step cannot be zero");
  // Python's PySlice_AdjustIndices.
  const auto adjust = [&](const Value* v, int64_t missing) {
    if (!v || !v->is_integer()) return missing;
    int64_t i = v->integer();
    if (i < 0) {
      i += size;
      if (i < 0) i = s < 0 ? -1 : 0;
    } else if (i >= size) {
      i = s < 0 ? size - 1 : size;
    }
    return i;
  };
  const int64_t begin = adjust(start, s < 0 ? size - 1 : 0);
  const int64_t end = adjust(stop, s < 0 ? -1 : size);
  List items;
  std::string text;
  for (int64_t i = begin; s > 0 ? i < end : i > end; i += s) {
    if (object.is_list()) {
      items.push_back(object.list()[i]);
    } else {
      text += object.string().substr(offsets[i], offsets[i + 1] - offsets[i]);
    }
  }
  if (object.is_string()) return Value::String(std::move(text));
  return Value::MakeList(std::move(items), object.is_tuple());
}

absl::StatusOr<List> Iterate(const Value& value) {
  switch (value.kind()) {
    case Value::Kind::kUndefined:
      return List{};
    case Value::Kind::kList:
      return value.list();
    case Value::Kind::kDict: {
      List keys;
      for (const auto& item : value.dict().items) keys.push_back(Value::String(item.first));
      return keys;
    }
    case Value::Kind::kString: {
      List chars;
      const std::vector<size_t> offsets = CodePointOffsets(value.string());
      for (size_t i = 0; i + 1 < offsets.size(); ++i) {
        chars.push_back(
            Value::String(value.string().substr(offsets[i], offsets[i + 1] - offsets[i])));
      }
      return chars;
    }
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("'", value.TypeName(), "' object is not iterable"));
  }
}

std::string Strip(const std::string& s, const std::string* chars, bool left, bool right) {
  const std::vector<char32_t> cps = Decode(s);
  const std::vector<size_t> offsets = CodePointOffsets(s);
  const std::vector<char32_t> set = chars ? Decode(*chars) : std::vector<char32_t>{};
  const auto strip = [&](char32_t cp) {
    if (!chars) return IsPythonSpace(cp);
    for (char32_t c : set) {
      if (c == cp) return true;
    }
    return false;
  };
  size_t begin = 0;
  size_t end = cps.size();
  if (left) {
    while (begin < end && strip(cps[begin])) ++begin;
  }
  if (right) {
    while (end > begin && strip(cps[end - 1])) --end;
  }
  return s.substr(offsets[begin], offsets[end] - offsets[begin]);
}

}  // namespace tandem::jinja
