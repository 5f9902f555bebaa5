// Strict front end for proto3 JSON documents: syntax with line and column, duplicate keys, and a
// walk of the document against a message Descriptor that names the path of every unknown field and
// wrong type. protobuf 3.21's JsonStringToMessage reports these without a usable path
// ("(vision.model) hiden: Cannot find field."), without a line for syntax errors, accepts trailing
// commas and keeps the last of two equal keys; this runs first so that users see
// "vision.model.hiden: unknown field".
//
// Messages returned here are InvalidArgument and start with the dotted path (or "line L, column C"
// for syntax), without a source name: callers put the file name in front. Stateless and
// thread-safe.
#pragma once

#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "google/protobuf/descriptor.h"
#include "nlohmann/json.hpp"

namespace tandem::jobspec {

// Parses JSON text (RFC 8259: no comments, no trailing commas). A syntax error reads
// "line 3, column 17: invalid JSON: <reason>"; a key given twice in one object reads
// "vision.engine.optimizer: duplicate key".
absl::StatusOr<nlohmann::json> ParseJsonStrict(std::string_view text);

// Checks `value` against the proto3 JSON mapping of `descriptor`, as protobuf's parser with
// ignore_unknown_fields = false would, but reporting paths. `path` names `value` ("" for the
// document, "vision.model" otherwise). Field names are accepted in snake_case (the .proto name) or
// lowerCamelCase (the JSON name); a field given under both is a duplicate. null means "absent", as
// in proto3 JSON. Errors:
//   "<path>.<key>: unknown field"
//   "<path>: must be an object, got string \"x\""        (messages; also a google.protobuf.Struct)
//   "<path>: must be an integer, got number 1.5"         (integers also accept integral floats such
//   as
//   "<path>: must be an integer in [0, 2147483647], ..."  1e3 and decimal strings such as "12")
//   "<path>: must be a number|a boolean|a string, got ..."
//   "<path>: at most one of \"shapes\", \"jsonl\" may be given, got both"   (a oneof)
// The content of a google.protobuf.Struct is not inspected: it is free-form.
absl::Status CheckJsonAgainstMessage(const nlohmann::json& value,
                                     const google::protobuf::Descriptor& descriptor,
                                     const std::string& path);

// "string \"x\"", "number 1.5", "boolean true", "null", "array", "object": what a type error says
// it got.
std::string DescribeJsonValue(const nlohmann::json& value);

}  // namespace tandem::jobspec
