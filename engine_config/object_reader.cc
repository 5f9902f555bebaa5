#include "engine_config/object_reader.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <utility>

#include "common/quote.h"
#include "common/strict_json.h"

namespace tandem::engine_config::internal {

using json = nlohmann::json;

bool Contains(Keys keys, std::string_view key) {
  return std::find(keys.begin(), keys.end(), key) != keys.end();
}

std::string Quoted(std::string_view s) { return QuoteForMessage(s); }

std::string Got(const json& v) {
  if (v.is_string()) {
    const std::string& s = v.get_ref<const std::string&>();
    if (s == "auto") {
      return "got string \"auto\" (a Hugging Face Trainer placeholder; write the value itself)";
    }
    return absl::StrCat("got string ", Quoted(s));
  }
  if (v.is_boolean()) return "got boolean";
  if (v.is_number()) return "got number";
  if (v.is_null()) return "got null";
  if (v.is_array()) return "got array";
  return "got object";
}

absl::StatusOr<ObjectReader> ObjectReader::Open(const json& value, std::string path,
                                                std::string child_prefix, Keys known) {
  if (!value.is_object()) return Error(path, "must be an object, ", Got(value));
  for (const auto& item : value.items()) {
    if (!Contains(known, item.key())) {
      return Error(absl::StrCat(child_prefix, item.key()), "unknown key");
    }
  }
  return ObjectReader(value, std::move(child_prefix));
}

absl::StatusOr<ObjectReader> ObjectReader::Child(std::string_view key, Keys known) const {
  std::string path = PathOf(key);
  std::string prefix = absl::StrCat(path, ".");
  return Open(*Find(key), std::move(path), std::move(prefix), known);
}

const json* ObjectReader::Find(std::string_view key) const {
  auto it = value_->find(key);
  return it == value_->end() ? nullptr : &*it;
}

absl::Status ObjectReader::Bool(std::string_view key, bool* out) const {
  const json* v = Find(key);
  if (v == nullptr) return absl::OkStatus();
  if (!v->is_boolean()) return Error(PathOf(key), "must be a boolean, ", Got(*v));
  *out = v->get<bool>();
  return absl::OkStatus();
}

absl::Status ObjectReader::String(std::string_view key, std::string* out) const {
  const json* v = Find(key);
  if (v == nullptr) return absl::OkStatus();
  if (!v->is_string()) return Error(PathOf(key), "must be a string, ", Got(*v));
  *out = v->get<std::string>();
  return absl::OkStatus();
}

absl::Status ObjectReader::Number(std::string_view key, Bound bound, double* out) const {
  const json* v = Find(key);
  if (v == nullptr) return absl::OkStatus();
  if (!v->is_number()) return Error(PathOf(key), "must be a number, ", Got(*v));
  double x = v->get<double>();
  if (!std::isfinite(x)) return Error(PathOf(key), "must be finite, got ", x);
  if (bound == Bound::kNonNegative && x < 0) return Error(PathOf(key), "must be >= 0, got ", x);
  if (bound == Bound::kPositive && x <= 0) return Error(PathOf(key), "must be > 0, got ", x);
  *out = x;
  return absl::OkStatus();
}

absl::Status ObjectReader::Int(std::string_view key, int64_t min, int64_t* out) const {
  const json* v = Find(key);
  if (v == nullptr) return absl::OkStatus();
  std::string path = PathOf(key);
  const JsonInteger integer = ReadJsonInteger(*v);
  if (integer.kind == JsonInteger::Kind::kNotAnInteger) {
    if (v->is_number_float()) return Error(path, "must be an integer, got ", v->get<double>());
    return Error(path, "must be an integer, ", Got(*v));
  }
  const std::optional<int64_t> x = integer.ToInt64();
  if (!x) {
    if (v->is_number_unsigned()) return Error(path, "out of range, got ", v->get<uint64_t>());
    return Error(path, "out of range, got ", v->get<double>());
  }
  if (*x < min) return Error(path, "must be >= ", min, ", got ", *x);
  *out = *x;
  return absl::OkStatus();
}

absl::Status ObjectReader::Betas(std::string_view key, double* beta1, double* beta2) const {
  const json* betas = Find(key);
  if (betas == nullptr) return absl::OkStatus();
  const std::string path = PathOf(key);
  if (!betas->is_array() || betas->size() != 2 || !(*betas)[0].is_number() ||
      !(*betas)[1].is_number()) {
    return Error(path, "must be an array of 2 numbers");
  }
  double b[2];
  for (int i = 0; i < 2; ++i) {
    b[i] = (*betas)[i].get<double>();
    if (!(b[i] >= 0.0 && b[i] < 1.0)) {
      return Error(absl::StrCat(path, "[", i, "]"), "must be in [0, 1), got ", b[i]);
    }
  }
  *beta1 = b[0];
  *beta2 = b[1];
  return absl::OkStatus();
}

}  // namespace tandem::engine_config::internal
