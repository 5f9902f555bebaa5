// The JSON front end: text -> strict checks -> JobSpec message -> JobConfig (resolve.cc), and the
// file loader.
#include "jobspec/job_spec.h"

#include <cerrno>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "common/strict_json.h"
#include "google/protobuf/util/json_util.h"
#include "jobspec/errors.h"
#include "jobspec/job_spec_proto.h"
#include "jobspec/proto_json.h"

namespace tandem::jobspec {
namespace {

absl::StatusOr<tandem::v1::JobSpec> ParseProto(std::string_view json) {
  // protobuf's parser alone would not name the path of an unknown field, would not give the line of
  // a syntax error, and would accept trailing commas and keep the last of two equal keys.
  ASSIGN_OR_RETURN(nlohmann::json document, ParseJsonStrict(json));
  RETURN_IF_ERROR(CheckJsonAgainstMessage(document, *tandem::v1::JobSpec::descriptor(), ""));

  // protobuf reads the document as nlohmann re-writes it (same values, no BOM, no odd whitespace),
  // so both parsers see exactly the same JSON.
  const std::string canonical = document.dump();
  tandem::v1::JobSpec spec;
  google::protobuf::util::JsonParseOptions options;
  options.ignore_unknown_fields = false;
  auto status = google::protobuf::util::JsonStringToMessage(canonical, &spec, options);
  if (!status.ok()) {
    // Not expected after the checks above; protobuf's message has its own "(path) field:" form.
    const auto message = status.message();
    return absl::InvalidArgumentError(absl::StrCat(
        "not a valid tandem.v1.JobSpec: ", absl::string_view(message.data(), message.size())));
  }
  return spec;
}

}  // namespace

absl::StatusOr<tandem::v1::JobSpec> ParseJobSpecProto(std::string_view json,
                                                      std::string_view source_name) {
  absl::StatusOr<tandem::v1::JobSpec> spec = ParseProto(json);
  if (!spec.ok()) return internal::WithSource(spec.status(), source_name);
  return spec;
}

absl::StatusOr<JobConfig> ParseJobSpecJson(std::string_view json, std::string_view source_name) {
  ASSIGN_OR_RETURN(tandem::v1::JobSpec spec, ParseJobSpecProto(json, source_name));
  return JobConfigFromProto(spec, source_name);
}

absl::StatusOr<JobConfig> LoadJobSpecFile(const std::string& path) {
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> file(std::fopen(path.c_str(), "rb"),
                                                       &std::fclose);
  if (file == nullptr) {
    if (errno == ENOENT) return absl::NotFoundError(absl::StrCat(path, ": no such file"));
    return absl::ErrnoToStatus(errno, absl::StrCat(path, ": cannot open"));
  }
  std::string text;
  char buffer[1 << 14];
  size_t n;
  while ((n = std::fread(buffer, 1, sizeof(buffer), file.get())) > 0) text.append(buffer, n);
  if (std::ferror(file.get()))
    return absl::ErrnoToStatus(errno, absl::StrCat(path, ": cannot read"));

  ASSIGN_OR_RETURN(JobConfig config, ParseJobSpecJson(text, path));
  std::error_code error;
  std::filesystem::path absolute = std::filesystem::absolute(path, error);
  if (error) {
    return absl::ErrnoToStatus(error.value(),
                               absl::StrCat(path, ": cannot make the path absolute"));
  }
  config.spec_dir = absolute.lexically_normal().parent_path().string();
  return config;
}

}  // namespace tandem::jobspec
