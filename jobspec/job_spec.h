// Job specs: the JSON file a user writes (a `tandem.v1.JobSpec`, proto/tandem/v1/job.proto) to a
// validated JobConfig (jobspec/job_config.h), and a JobConfig back to JSON.
//
// This header is plain C++ (no protobuf, no LibTorch), so LibTorch code may include it; the
// proto-side entry points are in jobspec/job_spec_proto.h. Every function is stateless and
// thread-safe.
//
// Errors. Every rejection is InvalidArgument (a missing file is NotFound), and its message reads
//   "<source>: <dotted.path>: <what is wrong>"
// e.g. "job.json: vision.model.hiden: unknown field" or "job.json: schedule.steps: must be >= 1,
// got 0". A JSON syntax error reads "job.json: line 3, column 17: invalid JSON: <reason>". With an
// empty source name the "<source>: " part is left out. Only the first problem found is reported.
#pragma once

#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "jobspec/job_config.h"

namespace tandem::jobspec {

// Parses and validates a job spec written as proto3 JSON (snake_case or lowerCamelCase field
// names). Strict: unknown fields, duplicate keys, wrong types, comments and trailing commas are
// errors. Presets are expanded, explicit model fields override them, absent fields take
// job_config.h's defaults, vision.model.output_dim is set to llm.model.hidden, and each group's
// engine block is validated with the engine's own parser and kept as compact JSON text in
// `engine_json`. Then ValidateJobConfig runs. `source_name` (usually the file name) starts every
// error message. spec_dir is left empty (relative data paths resolve against the current
// directory).
absl::StatusOr<JobConfig> ParseJobSpecJson(std::string_view json, std::string_view source_name);

// Reads the file at `path` and parses it as ParseJobSpecJson does, with `path` as the source name.
// spec_dir is set to the absolute directory holding the file, so the spec's relative data paths
// resolve against it. A missing file is NotFound ("<path>: no such file"); another read failure
// keeps its errno's code.
absl::StatusOr<JobConfig> LoadJobSpecFile(const std::string& path);

// Checks a resolved config: every rule of proto/tandem/v1/job.proto, the model divisibility rules,
// the sequence budget, and each group's engine_json (engine_config::ParseConfigJson with the
// "vision.engine." or "llm.engine." prefix, plus its agreement with `schedule`). Messages start
// with the dotted path, without a source name. The parser calls it; call it yourself on a JobConfig
// built in code.
absl::Status ValidateJobConfig(const JobConfig& config);

// Names that reach logs, metrics labels and `tandem jobs`: a job's `name` is a file name of at most
// kMaxNameLength characters of A-Z a-z 0-9 . _ -; a pool name (a spec's group pool, an actor's
// --pool) is at most kMaxPoolNameLength of the same characters, as a Kubernetes label value is.
inline constexpr size_t kMaxNameLength = 128;
inline constexpr size_t kMaxPoolNameLength = 63;
// OK, or InvalidArgument saying what is wrong with `pool` ("must not be empty", ...), without a path.
absl::Status CheckPoolName(std::string_view pool);

// The resolved spec as JSON that ParseJobSpecJson reads back into the same JobConfig: every spec
// field written out (presets kept by name and also expanded into explicit fields), snake_case names
// in the order of job.proto, 2-space indent, no trailing newline, engine configs embedded as JSON
// objects. Fields that are not part of a spec are not written: vision.model.output_dim (always
// llm.model.hidden), llm.model.vocab_size (from the tokenizer) and spec_dir. Instead, relative
// jsonl paths and resume_from are written joined with spec_dir, so the output stands on its own
// wherever it is stored: reading it back gives the same config with spec_dir "" (identical to the
// input when spec_dir was already ""). An engine_json that is not valid JSON is written as a string
// (which the parser then rejects).
std::string JobConfigToJson(const JobConfig& config);

// A path of the spec (a jsonl file, resume_from) as it is opened: joined with spec_dir when it is
// relative and spec_dir is set; "" stays "".
std::string SpecPath(const std::string& path, const std::string& spec_dir);

}  // namespace tandem::jobspec
