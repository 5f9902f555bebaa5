// The proto side of strict JSON: a walk of a document (parsed by common/strict_json.h, which gives
// syntax errors their line and column and rejects duplicate keys) against a message Descriptor that
// names the path of every unknown field and wrong type. protobuf 3.21's JsonStringToMessage reports
// these without a usable path ("(vision.model) hiden: Cannot find field."), without a line for
// syntax errors, accepts trailing commas and keeps the last of two equal keys; this runs first so
// that users see "vision.model.hiden: unknown field".
//
// Messages returned here are InvalidArgument and start with the dotted path, without a source
// name: callers put the file name in front. Stateless and thread-safe.
#pragma once

#include <string>

#include "absl/status/status.h"
#include "google/protobuf/descriptor.h"
#include "nlohmann/json.hpp"

namespace tandem::jobspec {

// Checks `value` against the proto3 JSON mapping of `descriptor`, as protobuf's parser with
// ignore_unknown_fields = false would, but reporting paths. `path` names `value` ("" for the
// document, "vision.model" otherwise). Field names are accepted in snake_case (the .proto name) or
// lowerCamelCase (the JSON name); a field given under both is a duplicate. null means "absent", as
// in proto3 JSON. Errors:
//   "<path>.<key>: unknown field"
//   "<path>: must be an object, got string \"x\""        (messages; also a google.protobuf.Struct)
//   "<path>: must be an integer, got number 1.5"         (integers also accept integral floats
//   "<path>: must be an integer in [0, 2147483647], ..."  such as 1e3 and decimal strings such as
//                                                         "12": common/strict_json.h)
//   "<path>: must be a number|a boolean|a string, got ..."
//   "<path>: at most one of \"shapes\", \"jsonl\" may be given, got both"   (a oneof)
// The content of a google.protobuf.Struct is not inspected: it is free-form.
absl::Status CheckJsonAgainstMessage(const nlohmann::json& value,
                                     const google::protobuf::Descriptor& descriptor,
                                     const std::string& path);

}  // namespace tandem::jobspec
