// The proto side of job specs: strict JSON -> `tandem.v1.JobSpec`, and a JobSpec message (from a
// file or from the wire) -> validated JobConfig. For the CLI and the coordinator, which link
// protobuf; code that includes LibTorch headers must use jobspec/job_spec.h instead (docs/design.md §6).
// Stateless and thread-safe. Error messages follow jobspec/job_spec.h: "<source>: <dotted.path>:
// <what is wrong>".
#pragma once

#include <string_view>

#include "absl/status/statusor.h"
#include "jobspec/job_config.h"
#include "proto/tandem/v1/job.pb.h"

namespace tandem::jobspec {

// Parses proto3 JSON into a JobSpec with the strict checks of ParseJobSpecJson (syntax with line
// and column, duplicate keys, unknown fields and wrong types with their paths), then
// google::protobuf::util::JsonStringToMessage with ignore_unknown_fields = false. The values are
// not validated yet: pass the result to JobConfigFromProto.
absl::StatusOr<tandem::v1::JobSpec> ParseJobSpecProto(std::string_view json,
                                                      std::string_view source_name);

// Resolves a JobSpec into a JobConfig (presets expanded, explicit fields applied, defaults filled,
// engine Structs converted to JSON text) and validates it with ValidateJobConfig. spec_dir is left
// empty: the caller knows where the spec came from.
//
// engine_json is the Struct as compact JSON with keys in sorted order; a number that is integral
// and within +-2^53 is written as an integer ("stage": 1, "reduce_bucket_size": 500000000), any
// other as a double. Struct numbers are doubles, so integers beyond 2^53 cannot be carried exactly.
absl::StatusOr<JobConfig> JobConfigFromProto(const tandem::v1::JobSpec& spec,
                                             std::string_view source_name);

}  // namespace tandem::jobspec
