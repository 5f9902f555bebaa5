#include "jobspec/proto_json.h"

#include <cstdint>
#include <limits>
#include <string_view>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/strict_json.h"
#include "jobspec/errors.h"

namespace tandem::jobspec {
namespace {

using json = nlohmann::json;
using google::protobuf::Descriptor;
using google::protobuf::FieldDescriptor;
using google::protobuf::OneofDescriptor;

using internal::JoinPath;

template <typename... Args>
absl::Status Error(std::string_view path, const Args&... what) {
  return internal::PathError(path, what...);
}

absl::Status CheckInteger(const json& value, const FieldDescriptor& field,
                          const std::string& path) {
  const JsonInteger integer = ReadJsonInteger(value, JsonIntegerStrings::kAccept);
  if (integer.kind != JsonInteger::Kind::kInteger) {
    return Error(path, "must be an integer, got ", DescribeJsonValue(value));
  }
  int64_t min = 0;
  uint64_t max = 0;
  switch (field.cpp_type()) {
    case FieldDescriptor::CPPTYPE_INT32:
      min = std::numeric_limits<int32_t>::min();
      max = std::numeric_limits<int32_t>::max();
      break;
    case FieldDescriptor::CPPTYPE_INT64:
      min = std::numeric_limits<int64_t>::min();
      max = std::numeric_limits<int64_t>::max();
      break;
    case FieldDescriptor::CPPTYPE_UINT32:
      max = std::numeric_limits<uint32_t>::max();
      break;
    default:  // CPPTYPE_UINT64
      max = std::numeric_limits<uint64_t>::max();
      break;
  }
  if (!integer.InRange(min, max)) {
    return Error(path, "must be an integer in [", min, ", ", max, "], got ",
                 DescribeJsonValue(value));
  }
  return absl::OkStatus();
}

absl::Status CheckMessage(const json& value, const Descriptor& descriptor, const std::string& path);

// One value of `field`: the field itself, or one element of a repeated field.
absl::Status CheckValue(const json& value, const FieldDescriptor& field, const std::string& path) {
  switch (field.cpp_type()) {
    case FieldDescriptor::CPPTYPE_INT32:
    case FieldDescriptor::CPPTYPE_INT64:
    case FieldDescriptor::CPPTYPE_UINT32:
    case FieldDescriptor::CPPTYPE_UINT64:
      return CheckInteger(value, field, path);
    case FieldDescriptor::CPPTYPE_DOUBLE:
    case FieldDescriptor::CPPTYPE_FLOAT:
      if (!value.is_number())
        return Error(path, "must be a number, got ", DescribeJsonValue(value));
      return absl::OkStatus();
    case FieldDescriptor::CPPTYPE_BOOL:
      if (!value.is_boolean())
        return Error(path, "must be a boolean, got ", DescribeJsonValue(value));
      return absl::OkStatus();
    case FieldDescriptor::CPPTYPE_STRING:
      if (!value.is_string())
        return Error(path, "must be a string, got ", DescribeJsonValue(value));
      return absl::OkStatus();
    case FieldDescriptor::CPPTYPE_ENUM:
      if (!value.is_string() && !value.is_number_integer()) {
        return Error(path, "must be an enum name or number, got ", DescribeJsonValue(value));
      }
      return absl::OkStatus();
    case FieldDescriptor::CPPTYPE_MESSAGE: {
      const Descriptor& type = *field.message_type();
      if (type.full_name() == "google.protobuf.Struct") {
        if (!value.is_object())
          return Error(path, "must be an object, got ", DescribeJsonValue(value));
        return absl::OkStatus();  // free-form; its owner validates the content
      }
      if (type.full_name() == "google.protobuf.ListValue") {
        if (!value.is_array())
          return Error(path, "must be an array, got ", DescribeJsonValue(value));
        return absl::OkStatus();  // likewise
      }
      if (type.file()->package() == "google.protobuf") {
        return absl::OkStatus();  // other well-known types have their own JSON forms: protobuf
                                  // checks
      }
      return CheckMessage(value, type, path);
    }
  }
  return absl::OkStatus();
}

absl::Status CheckField(const json& value, const FieldDescriptor& field, const std::string& path) {
  if (field.is_map()) {
    if (!value.is_object()) return Error(path, "must be an object, got ", DescribeJsonValue(value));
    return absl::OkStatus();  // no map fields yet; protobuf checks keys and values
  }
  if (field.is_repeated()) {
    if (!value.is_array()) return Error(path, "must be an array, got ", DescribeJsonValue(value));
    for (size_t i = 0; i < value.size(); ++i) {
      if (value[i].is_null()) return Error(absl::StrCat(path, "[", i, "]"), "must not be null");
      absl::Status status = CheckValue(value[i], field, absl::StrCat(path, "[", i, "]"));
      if (!status.ok()) return status;
    }
    return absl::OkStatus();
  }
  return CheckValue(value, field, path);
}

const FieldDescriptor* FindField(const Descriptor& descriptor, const std::string& key) {
  if (const FieldDescriptor* field = descriptor.FindFieldByName(key)) return field;
  for (int i = 0; i < descriptor.field_count(); ++i) {
    if (descriptor.field(i)->json_name() == key) return descriptor.field(i);
  }
  return nullptr;
}

std::string OneofMembers(const OneofDescriptor& oneof) {
  std::vector<std::string> names;
  for (int i = 0; i < oneof.field_count(); ++i)
    names.push_back(absl::StrCat("\"", oneof.field(i)->name(), "\""));
  return absl::StrJoin(names, ", ");
}

absl::Status CheckMessage(const json& value, const Descriptor& descriptor,
                          const std::string& path) {
  if (!value.is_object()) return Error(path, "must be an object, got ", DescribeJsonValue(value));
  std::vector<const FieldDescriptor*> seen;
  std::vector<const FieldDescriptor*> oneof_set(descriptor.oneof_decl_count(), nullptr);
  for (const auto& item : value.items()) {
    const std::string& key = item.key();
    const std::string key_path = JoinPath(path, key);
    const FieldDescriptor* field = FindField(descriptor, key);
    if (field == nullptr) return Error(key_path, "unknown field");
    for (const FieldDescriptor* other : seen) {
      if (other == field) {
        return Error(key_path, "duplicate field: \"", field->name(), "\" and \"",
                     field->json_name(), "\" are the same field");
      }
    }
    seen.push_back(field);
    if (item.value().is_null()) continue;  // proto3 JSON: null is the same as absent
    if (const OneofDescriptor* oneof = field->containing_oneof()) {
      const FieldDescriptor*& first = oneof_set[oneof->index()];
      if (first != nullptr) {
        return Error(path.empty() ? key_path : path, "at most one of ", OneofMembers(*oneof),
                     " may be given, got \"", first->name(), "\" and \"", field->name(), "\"");
      }
      first = field;
    }
    absl::Status status = CheckField(item.value(), *field, key_path);
    if (!status.ok()) return status;
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status CheckJsonAgainstMessage(const json& value, const Descriptor& descriptor,
                                     const std::string& path) {
  return CheckMessage(value, descriptor, path);
}

}  // namespace tandem::jobspec
