// Job specs: the JSON file a user writes (a `tandem.v1.JobSpec`, proto/tandem/v1/job.proto), read
// once into its resolved form (the message with absolute paths, and its validated JobConfig,
// jobspec/job_config.h).
//
// This header is plain C++ (no protobuf, no LibTorch), so LibTorch code may include it: it holds
// the message only by a pointer to a type declared here. The proto-side entry points (the message
// in, the message out) are in jobspec/job_spec_proto.h. Every function is stateless and
// thread-safe.
//
// Errors. Every rejection is InvalidArgument (a missing file is NotFound), and its message reads
//   "<source>: <dotted.path>: <what is wrong>"
// e.g. "job.json: vision.model.hiden: unknown field" or "job.json: schedule.steps: must be >= 1,
// got 0". A JSON syntax error reads "job.json: line 3, column 17: invalid JSON: <reason>". With an
// empty source name the "<source>: " part is left out. Only the first problem found is reported.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "jobspec/job_config.h"

namespace tandem::v1 {
class JobSpec;  // proto/tandem/v1/job.pb.h
}  // namespace tandem::v1

namespace tandem::jobspec {

// A spec in the one form the rest of Tandem sees: the message, its JSON and its JobConfig, made
// from each other once. `spec`'s paths (data files, pretrained directories, resume_from) are
// absolute when it came from a file.
struct ResolvedJobSpec {
  std::shared_ptr<const tandem::v1::JobSpec> spec;  // include job_spec_proto.h to read it
  // `spec` as protobuf's JSON printer writes it (JobSpecToJson): a run directory's job.json, the
  // coordinator's stored copy; ResolveJobSpecJson reads it back to the same spec.
  std::string json;
  JobConfig config;  // built from `spec` and validated
};

// Parses and validates a job spec written as proto3 JSON (snake_case or lowerCamelCase field
// names). Strict: unknown fields, duplicate keys, wrong types, comments and trailing commas are
// errors. Then the message is checked (ValidateJobSpec, job_spec_proto.h) and resolved: presets
// are expanded, explicit model fields override them, absent fields take job_config.h's defaults,
// vision.model.output_dim is set to llm.model.hidden, each group's engine block is kept as compact
// JSON text in `engine_json`, and ValidateJobConfig runs. `source_name` (usually the file name)
// starts every error message. Relative paths stay as written (they resolve against the working
// directory).
absl::StatusOr<ResolvedJobSpec> ResolveJobSpecJson(std::string_view json,
                                                   std::string_view source_name);

// ResolveJobSpecJson's config alone: for a JobConfig from JSON text (tests, tools).
absl::StatusOr<JobConfig> ParseJobSpecJson(std::string_view json, std::string_view source_name);

// Reads the file at `path` once and resolves it as ResolveJobSpecJson does, with `path` as the
// source name, after making the spec's relative paths absolute against the directory holding the
// file (normalised: "data/../x.jsonl" is "<dir>/x.jsonl"). A missing file is NotFound ("<path>: no
// such file"); another read failure keeps its errno's code.
absl::StatusOr<ResolvedJobSpec> ReadJobSpecFile(const std::string& path);

// Checks a resolved config: the rules of proto/tandem/v1/job.proto on values, the model
// divisibility rules, the sequence budget, and each group's engine_json
// (engine_config::ParseConfigJson with the "vision.engine." or "llm.engine." prefix, plus its
// agreement with `schedule`). Messages start with the dotted path, without a source name. The
// parser calls it; call it yourself on a JobConfig built in code.
absl::Status ValidateJobConfig(const JobConfig& config);

// Names that reach logs, metrics labels and `tandem jobs`: a job's `name` is a file name of at most
// kMaxNameLength characters of A-Z a-z 0-9 . _ -; a pool name (a spec's group pool, an actor's
// --pool) is at most kMaxPoolNameLength of the same characters, as a Kubernetes label value is.
inline constexpr size_t kMaxNameLength = 128;
inline constexpr size_t kMaxPoolNameLength = 63;
// OK, or InvalidArgument saying what is wrong with `pool` ("must not be empty", ...), without a
// path.
absl::Status CheckPoolName(std::string_view pool);

}  // namespace tandem::jobspec
