// The proto side of job specs: strict JSON -> `tandem.v1.JobSpec`, the checks on the message, a
// JobSpec message (from a file, the store or the wire) -> ResolvedJobSpec, and the message back to
// JSON with protobuf's own printer. For the CLI, the coordinator and the actor service, which link
// protobuf; code that includes LibTorch headers must use jobspec/job_spec.h instead (docs/design.md
// §6). Stateless and thread-safe. Error messages follow jobspec/job_spec.h: "<source>:
// <dotted.path>: <what is wrong>".
#pragma once

#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "jobspec/job_config.h"
#include "jobspec/job_spec.h"
#include "proto/tandem/v1/job.pb.h"

namespace tandem::jobspec {

// Parses proto3 JSON into a JobSpec with the strict checks of ResolveJobSpecJson (syntax with line
// and column, duplicate keys, unknown fields and wrong types with their paths), then
// google::protobuf::util::JsonStringToMessage with ignore_unknown_fields = false. The values are
// not validated yet: pass the result to ResolveJobSpec.
absl::StatusOr<tandem::v1::JobSpec> ParseJobSpecProto(std::string_view json,
                                                      std::string_view source_name);

// Checks what is wrong with the message before it is resolved, without a source name: a data
// source is given, the presets are known, pretrained excludes vision.pretrained, llm.pretrained
// and the groups' model blocks, each group's parallel block names only its own dimensions, and
// llm.parallel.embeddings is a known route. The values are ValidateJobConfig's (validate.cc holds
// both).
absl::Status ValidateJobSpec(const tandem::v1::JobSpec& spec);

// ValidateJobSpec, then the message resolved into a JobConfig (presets expanded, explicit fields
// applied, defaults filled, engine Structs converted to JSON text) and ValidateJobConfig. The
// paths are kept as they are.
//
// engine_json is the Struct as compact JSON with keys in sorted order; a number that is integral
// and within +-2^53 is written as an integer ("stage": 1, "reduce_bucket_size": 500000000), any
// other as a double. Struct numbers are doubles, so integers beyond 2^53 cannot be carried exactly.
absl::StatusOr<ResolvedJobSpec> ResolveJobSpec(tandem::v1::JobSpec spec,
                                               std::string_view source_name);

// The message as protobuf's JSON printer writes it: the .proto field names (snake_case) in
// job.proto's order, fields with their default value left out (an `optional` field that is set is
// written even at its zero), int64 values as strings (proto3 JSON). Then re-indented by 2 spaces,
// with the engine blocks' keys sorted (a Struct prints in its map's varying order), no trailing
// newline: one message always gives the same text. ParseJobSpecProto reads it back to an equal
// message.
std::string JobSpecToJson(const tandem::v1::JobSpec& spec);

// Every path of the spec (data.jsonl/conversations train and eval, pretrained, vision.pretrained,
// llm.pretrained, resume_from): a relative one joined to `dir` and normalised; "" stays "".
void MakePathsAbsolute(const std::string& dir, tandem::v1::JobSpec& spec);

// OK when every path of the spec is absolute or empty, else InvalidArgument naming the first
// relative one: "<path>: 'x.jsonl' is relative; <why>".
absl::Status CheckPathsAbsolute(const tandem::v1::JobSpec& spec, std::string_view why);

}  // namespace tandem::jobspec
