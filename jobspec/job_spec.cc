// The JSON front end: text -> strict checks -> JobSpec message (-> ResolvedJobSpec, resolve.cc),
// the file reader that makes paths absolute, and the message back to JSON.
#include "jobspec/job_spec.h"

#include <cerrno>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "common/strict_json.h"
#include "google/protobuf/util/json_util.h"
#include "jobspec/errors.h"
#include "jobspec/job_spec_proto.h"
#include "jobspec/proto_json.h"
#include "nlohmann/json.hpp"

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

// Calls `visit(path, value)` on every path field of the spec that is set, in job.proto's order.
template <typename Visit>
void ForEachPath(tandem::v1::JobSpec& spec, Visit visit) {
  if (spec.has_data() && spec.data().has_jsonl()) {
    visit("data.jsonl.train", *spec.mutable_data()->mutable_jsonl()->mutable_train());
    visit("data.jsonl.eval", *spec.mutable_data()->mutable_jsonl()->mutable_eval());
  }
  if (spec.has_data() && spec.data().has_conversations()) {
    tandem::v1::ConversationsDataSpec& conversations =
        *spec.mutable_data()->mutable_conversations();
    visit("data.conversations.train", *conversations.mutable_train());
    visit("data.conversations.eval", *conversations.mutable_eval());
  }
  if (spec.has_data() && spec.data().has_shards()) {
    tandem::v1::ShardsDataSpec& shards = *spec.mutable_data()->mutable_shards();
    visit("data.shards.train", *shards.mutable_train());
    visit("data.shards.eval", *shards.mutable_eval());
  }
  if (spec.has_data() && spec.data().has_mixture()) {
    auto& sources = *spec.mutable_data()->mutable_mixture()->mutable_sources();
    for (int i = 0; i < sources.size(); ++i) {
      tandem::v1::MixtureSourceSpec& source = sources[i];
      const std::string at = absl::StrCat("data.mixture.sources[", i, "].");
      const auto files = [&](const char* kind, std::string& train, std::string& eval) {
        visit(at + kind + ".train", train);
        visit(at + kind + ".eval", eval);
      };
      if (source.has_jsonl())
        files("jsonl", *source.mutable_jsonl()->mutable_train(),
              *source.mutable_jsonl()->mutable_eval());
      if (source.has_conversations())
        files("conversations", *source.mutable_conversations()->mutable_train(),
              *source.mutable_conversations()->mutable_eval());
      if (source.has_shards())
        files("shards", *source.mutable_shards()->mutable_train(),
              *source.mutable_shards()->mutable_eval());
    }
  }
  if (spec.has_vision()) visit("vision.pretrained", *spec.mutable_vision()->mutable_pretrained());
  if (spec.has_llm()) visit("llm.pretrained", *spec.mutable_llm()->mutable_pretrained());
  visit("resume_from", *spec.mutable_resume_from());
  visit("pretrained", *spec.mutable_pretrained());
}

}  // namespace

absl::StatusOr<tandem::v1::JobSpec> ParseJobSpecProto(std::string_view json,
                                                      std::string_view source_name) {
  absl::StatusOr<tandem::v1::JobSpec> spec = ParseProto(json);
  if (!spec.ok()) return internal::WithSource(spec.status(), source_name);
  return spec;
}

std::string JobSpecToJson(const tandem::v1::JobSpec& spec) {
  google::protobuf::util::JsonPrintOptions options;
  options.preserve_proto_field_names = true;
  std::string json;
  // Printing a valid message cannot fail (only an Any of an unknown type would).
  (void)google::protobuf::util::MessageToJsonString(spec, &json, options);
  // The fields keep job.proto's order; a Struct's keys (the engine blocks) come out in its map's
  // order, which varies: they are sorted, so that one spec always prints the same text.
  nlohmann::ordered_json document = nlohmann::ordered_json::parse(json);
  for (const char* group : {"vision", "llm"}) {
    if (document.contains(group) && document[group].contains("engine")) {
      document[group]["engine"] = nlohmann::ordered_json(nlohmann::json(document[group]["engine"]));
    }
  }
  return document.dump(2);
}

void MakePathsAbsolute(const std::string& dir, tandem::v1::JobSpec& spec) {
  ForEachPath(spec, [&](std::string_view, std::string& path) {
    if (path.empty() || std::filesystem::path(path).is_absolute()) return;
    path = (std::filesystem::path(dir) / path).lexically_normal().string();
  });
}

absl::Status CheckPathsAbsolute(const tandem::v1::JobSpec& spec, std::string_view why) {
  tandem::v1::JobSpec copy = spec;
  absl::Status status;
  ForEachPath(copy, [&](std::string_view name, std::string& path) {
    if (!status.ok() || path.empty() || std::filesystem::path(path).is_absolute()) return;
    status = internal::PathError(name, internal::Quoted(path), " is relative; ", internal::Sv(why));
  });
  return status;
}

absl::StatusOr<ResolvedJobSpec> ResolveJobSpecJson(std::string_view json,
                                                   std::string_view source_name) {
  ASSIGN_OR_RETURN(tandem::v1::JobSpec spec, ParseJobSpecProto(json, source_name));
  return ResolveJobSpec(std::move(spec), source_name);
}

absl::StatusOr<JobConfig> ParseJobSpecJson(std::string_view json, std::string_view source_name) {
  ASSIGN_OR_RETURN(ResolvedJobSpec resolved, ResolveJobSpecJson(json, source_name));
  return std::move(resolved.config);
}

absl::StatusOr<ResolvedJobSpec> ReadJobSpecFile(const std::string& path) {
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

  ASSIGN_OR_RETURN(tandem::v1::JobSpec spec, ParseJobSpecProto(text, path));
  std::error_code error;
  std::filesystem::path absolute = std::filesystem::absolute(path, error);
  if (error) {
    return absl::ErrnoToStatus(error.value(),
                               absl::StrCat(path, ": cannot make the path absolute"));
  }
  MakePathsAbsolute(absolute.lexically_normal().parent_path().string(), spec);
  return ResolveJobSpec(std::move(spec), path);
}

}  // namespace tandem::jobspec
