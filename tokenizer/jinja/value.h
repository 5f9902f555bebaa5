// The values a chat template computes with, as Python and Jinja see them: undefined, None, bools,
// integers (64-bit here; an overflow is an error, where Python would grow), floats, strings (UTF-8,
// indexed and measured in code points as Python's str is), lists and tuples, insertion-ordered
// dicts with string keys, namespaces (the one mutable object a template may make) and callables
// (macros, globals, bound methods).
//
// Printing follows Python's str() and repr() (`{{ [1, 'a', None] }}` prints "[1, 'a', None]", a
// float prints its shortest round-trip digits: 0.1 + 0.2 is 0.30000000000000004), equality
// Python's == (1 == 1.0 == True), truth Python's bool(). Lists, dicts and namespaces are shared
// by reference, as in Python. Not thread-safe; a value belongs to one render.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace tandem::jinja {

class Value;
using List = std::vector<Value>;

// A Python dict restricted to string keys, in insertion order.
struct Dict {
  std::vector<std::pair<std::string, Value>> items;
  const Value* Find(std::string_view key) const;
  void Set(const std::string& key, Value value);
};

struct CallArgs {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keyword;
};

struct Callable {
  std::string name;
  std::function<absl::StatusOr<Value>(CallArgs&)> call;
};

class Value {
 public:
  enum class Kind {
    kUndefined,
    kNone,
    kBool,
    kInt,
    kFloat,
    kString,
    kList,
    kDict,
    kNamespace,
    kCallable
  };

  Value() = default;  // undefined, with no hint
  // `hint` is the error its use raises: "'tools' is undefined", "'dict object' has no attribute
  // 'x'".
  static Value Undefined(std::string hint);
  static Value None();
  static Value Bool(bool b);
  static Value Int(int64_t i);
  static Value Float(double f);
  static Value String(std::string s);
  static Value MakeList(List items, bool tuple = false);
  static Value MakeDict(Dict dict);
  static Value MakeNamespace(Dict attributes);
  static Value MakeCallable(std::string name, std::function<absl::StatusOr<Value>(CallArgs&)> call);
  // JSON as Python's json.loads gives it: objects are dicts, arrays lists, integers ints.
  static Value FromJson(const nlohmann::json& json);
  static Value FromJson(const nlohmann::ordered_json& json);  // keeps the objects' key order

  Kind kind() const { return kind_; }
  bool is_undefined() const { return kind_ == Kind::kUndefined; }
  bool is_none() const { return kind_ == Kind::kNone; }
  bool is_string() const { return kind_ == Kind::kString; }
  bool is_list() const { return kind_ == Kind::kList; }
  bool is_dict() const { return kind_ == Kind::kDict; }
  bool is_namespace() const { return kind_ == Kind::kNamespace; }
  bool is_callable() const { return kind_ == Kind::kCallable; }
  // Python's int and bool (a bool is an int).
  bool is_integer() const { return kind_ == Kind::kInt || kind_ == Kind::kBool; }
  bool is_number() const { return is_integer() || kind_ == Kind::kFloat; }
  bool is_tuple() const { return kind_ == Kind::kList && tuple_; }

  bool boolean() const { return b_; }
  int64_t integer() const { return kind_ == Kind::kBool ? (b_ ? 1 : 0) : i_; }
  double number() const { return kind_ == Kind::kFloat ? f_ : static_cast<double>(integer()); }
  const std::string& string() const { return s_; }  // a string's text; an undefined value's hint
  const List& list() const { return *list_; }
  const Dict& dict() const { return *dict_; }
  Dict& mutable_namespace() const { return *dict_; }
  const Callable& callable() const { return *callable_; }

  // Python's bool(value).
  bool Truthy() const;
  // Python's str(value); undefined prints as "".
  std::string Str() const;
  // Python's repr(value).
  std::string Repr() const;
  // Python's type name, for errors: "str", "int", "list", "dict", "NoneType", "undefined".
  std::string TypeName() const;
  // json.dumps(value, ensure_ascii=False, indent=..., separators=..., sort_keys=...); indent < 0
  // is None. InvalidArgument for what JSON cannot hold (undefined, a callable).
  absl::StatusOr<std::string> ToJson(int indent, const std::string& item_separator,
                                     const std::string& key_separator, bool sort_keys) const;

 private:
  Kind kind_ = Kind::kUndefined;
  bool b_ = false;
  bool tuple_ = false;
  int64_t i_ = 0;
  double f_ = 0;
  std::string s_;
  std::shared_ptr<List> list_;
  std::shared_ptr<Dict> dict_;
  std::shared_ptr<Callable> callable_;
};

// Python's ==.
bool Equal(const Value& a, const Value& b);
// Python's <, for numbers, strings and lists of them; InvalidArgument for other pairs.
absl::StatusOr<bool> Less(const Value& a, const Value& b);

// Python's repr of a float: the shortest digits that read back as the same double.
std::string FloatRepr(double f);
// Python's str.isspace for one code point.
bool IsPythonSpace(char32_t cp);
// The code point at byte `at` of UTF-8 text and its byte `length`; an invalid byte decodes as
// itself (0x80-0xFF), one byte long.
char32_t DecodeAt(std::string_view text, size_t at, size_t* length);
// The code points of UTF-8 text, as DecodeAt reads them.
std::vector<char32_t> Decode(std::string_view text);
std::string Encode(char32_t cp);
// Byte offsets of each code point's start in `text`, and text.size() at the end.
std::vector<size_t> CodePointOffsets(std::string_view text);

}  // namespace tandem::jinja
