// Tests for the spec's one resolved form (jobspec/job_spec_proto.h): JobSpecToJson is protobuf's
// printer and reads back to the same message and config, and every field of job.proto travels from
// a spec file to an actor's JobConfig (the file read once, the message on the wire, the
// coordinator's stored JSON) and changes that config: a field added to job.proto without an entry
// in kFields below, or without its line in resolve.cc, fails here (docs/design.md §8, "Adding a
// spec field").
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/util/message_differencer.h"
#include "gtest/gtest.h"
#include "jobspec/job_spec.h"
#include "jobspec/job_spec_proto.h"
#include "proto/tandem/v1/actor.pb.h"
#include "tests/jobspec/spec_testing.h"

namespace tandem::jobspec {
namespace {

using ::google::protobuf::util::MessageDifferencer;
using ::testing::StartsWith;

TEST(JobSpecToJson, RoundTripsToAnEqualSpecAndConfig) {
  json spec = BaseSpec();
  spec["data"]["shapes"]["seed"] = 18446744073709551615ull;
  spec["vision"]["pool"] = "gpu-a";
  spec["vision"]["model"] = {{"preset", "vit-tiny"}, {"norm_eps", 1e-5}, {"positions", "sincos"}};
  spec["vision"]["engine"] =
      json::parse(R"({"bf16": {"enabled": true}, "optimizer": {"type": "AdamW",
      "params": {"lr": 3e-4, "betas": [0.9, 0.95]}}, "zero_optimization": {"stage": 3}})");
  spec["vision"]["freeze"] = {"patch_embed.*", "blocks.0.*"};
  spec["vision"]["parallel"] = {{"sequence", 2}};
  spec["llm"]["actors"] = 2;
  spec["llm"]["parallel"] = {{"tensor", 2}, {"embeddings", "broadcast"}};
  spec["llm"]["model"] = {{"hidden", 96},
                          {"heads", 6},
                          {"kv_heads", 2},
                          {"rope_theta", 12345.5},
                          {"tie_embeddings", false},
                          {"max_seq_len", 100}};
  spec["schedule"] = {{"global_batch", 12}, {"micro_batches", 3}, {"steps", 7},
                      {"eval_every", 2},    {"eval_samples", 5},  {"checkpoint_every", 3},
                      {"seed", 99}};
  spec["failure"] = {{"max_restarts", 7}};
  spec["resume_from"] = "/runs/a/checkpoints/step-000003";
  absl::StatusOr<ResolvedJobSpec> original = ResolveJobSpecJson(spec.dump(), "job.json");
  ASSERT_TRUE(original.ok()) << original.status();
  EXPECT_EQ(original->config.max_restarts, 7);
  EXPECT_EQ(original->config.llm.embeddings, EmbeddingRoute::kBroadcast);
  absl::StatusOr<ResolvedJobSpec> again = ResolveJobSpecJson(original->json, "round-trip");
  ASSERT_TRUE(again.ok()) << again.status() << "\n" << original->json;
  EXPECT_TRUE(MessageDifferencer::Equals(*again->spec, *original->spec));
  ExpectSameConfig(original->config, again->config);
  EXPECT_EQ(again->json, original->json);
}

TEST(JobSpecToJson, IsProtobufsJsonWithSnakeCaseAndTwoSpaceIndent) {
  absl::StatusOr<ResolvedJobSpec> resolved = ResolveJobSpecJson(BaseSpec().dump(), "job.json");
  ASSERT_TRUE(resolved.ok()) << resolved.status();
  EXPECT_THAT(resolved->json,
              StartsWith("{\n  \"name\": \"t\",\n  \"data\": {\n    \"shapes\": {"));
  const json written = json::parse(resolved->json);
  EXPECT_EQ(written["data"]["max_text_tokens"], "12");  // proto3 JSON writes int64 as a string
  EXPECT_EQ(written["vision"]["model"], json({{"preset", "vit-tiny"}}));  // as given, not expanded
  EXPECT_FALSE(written.contains("resume_from"));  // a default value is left out
  EXPECT_NE(resolved->json.back(), '\n');
}

// BaseSpec with room in the LLM's positions for the larger towers below.
json FieldsBase() {
  json spec = BaseSpec();
  spec["llm"]["model"]["max_seq_len"] = 512;
  return spec;
}

// Every field of JobSpec: two valid settings that must give different configs (JSON merge patches
// applied to FieldsBase), or {"refused": part of the error a setting of it gets, "value": that
// setting (default 1)} for a field that has one valid value or none.
const json& Fields() {
  static const json* fields = new json(json::parse(R"json({
    "name": [{"name": "a"}, {"name": "b"}],
    "data.shapes.seed": [{"data": {"shapes": {"seed": 1}}}, {"data": {"shapes": {"seed": 2}}}],
    "data.shapes.train_samples": [{"data": {"shapes": {"train_samples": 100}}},
                                  {"data": {"shapes": {"train_samples": 200}}}],
    "data.shapes.eval_samples": [{"data": {"shapes": {"eval_samples": 10}}},
                                 {"data": {"shapes": {"eval_samples": 20}}}],
    "data.shapes.conversations": [{"data": {"shapes": {"conversations": false}}},
                                  {"data": {"shapes": {"conversations": true}}}],
    "data.jsonl.train": [{"data": {"shapes": null, "jsonl": {"train": "/a.jsonl"}}},
                         {"data": {"shapes": null, "jsonl": {"train": "/b.jsonl"}}}],
    "data.jsonl.eval": [{"data": {"shapes": null, "jsonl": {"train": "/a.jsonl"}}},
                        {"data": {"shapes": null, "jsonl": {"train": "/a.jsonl", "eval": "/e.jsonl"}}}],
    "data.conversations.train": [{"data": {"shapes": null, "conversations": {"train": "/a.json"}}},
                                 {"data": {"shapes": null, "conversations": {"train": "/b.json"}}}],
    "data.conversations.eval": [
      {"data": {"shapes": null, "conversations": {"train": "/a.json"}}},
      {"data": {"shapes": null, "conversations": {"train": "/a.json", "eval": "/e.json"}}}],
    "data.shards.train": [{"data": {"shapes": null, "shards": {"train": "/a.tar"}}},
                          {"data": {"shapes": null, "shards": {"train": "/b-{0..1}.tar"}}}],
    "data.shards.eval": [{"data": {"shapes": null, "shards": {"train": "/a.tar"}}},
                         {"data": {"shapes": null, "shards": {"train": "/a.tar", "eval": "/e"}}}],
    "data.shards.shuffle_buffer": [
      {"data": {"shapes": null, "shards": {"train": "/a.tar", "shuffle_buffer": 100}}},
      {"data": {"shapes": null, "shards": {"train": "/a.tar", "shuffle_buffer": 200}}}],
    "data.mixture.sources.name": [
      {"data": {"shapes": null, "mixture": {"sources": [{"name": "a", "weight": 1, "shapes": {}}]}}},
      {"data": {"shapes": null, "mixture": {"sources": [{"name": "b", "weight": 1, "shapes": {}}]}}}],
    "data.mixture.sources.weight": [
      {"data": {"shapes": null, "mixture": {"sources": [{"name": "a", "weight": 1, "shapes": {}}]}}},
      {"data": {"shapes": null, "mixture": {"sources": [{"name": "a", "weight": 2, "shapes": {}}]}}}],
    "data.mixture.sources.shapes.seed": [
      {"data": {"shapes": null, "mixture": {"sources": [{"name": "a", "weight": 1, "shapes": {"seed": 1}}]}}},
      {"data": {"shapes": null, "mixture": {"sources": [{"name": "a", "weight": 1, "shapes": {"seed": 2}}]}}}],
    "data.mixture.sources.shapes.train_samples": [
      {"data": {"shapes": null, "mixture": {"sources": [{"name": "a", "weight": 1, "shapes": {"train_samples": 100}}]}}},
      {"data": {"shapes": null, "mixture": {"sources": [{"name": "a", "weight": 1, "shapes": {"train_samples": 200}}]}}}],
    "data.mixture.sources.shapes.eval_samples": [
      {"data": {"shapes": null, "mixture": {"sources": [{"name": "a", "weight": 1, "shapes": {"eval_samples": 10}}]}}},
      {"data": {"shapes": null, "mixture": {"sources": [{"name": "a", "weight": 1, "shapes": {"eval_samples": 20}}]}}}],
    "data.mixture.sources.shapes.conversations": [
      {"data": {"shapes": null, "mixture": {"sources": [{"name": "a", "weight": 1, "shapes": {"conversations": false}}]}}},
      {"data": {"shapes": null, "mixture": {"sources": [{"name": "a", "weight": 1, "shapes": {"conversations": true}}]}}}],
    "data.mixture.sources.jsonl.train": [
      {"data": {"shapes": null, "mixture": {"sources": [{"name": "a", "weight": 1, "jsonl": {"train": "/a.jsonl"}}]}}},
      {"data": {"shapes": null, "mixture": {"sources": [{"name": "a", "weight": 1, "jsonl": {"train": "/b.jsonl"}}]}}}],
    "data.mixture.sources.jsonl.eval": [
      {"data": {"shapes": null, "mixture": {"sources": [{"name": "a", "weight": 1, "jsonl": {"train": "/a.jsonl"}}]}}},
      {"data": {"shapes": null, "mixture": {"sources": [{"name": "a", "weight": 1, "jsonl": {"train": "/a.jsonl", "eval": "/e.jsonl"}}]}}}],
    "data.mixture.sources.conversations.train": [
      {"data": {"shapes": null, "mixture": {"sources": [{"name": "a", "weight": 1, "conversations": {"train": "/a.json"}}]}}},
      {"data": {"shapes": null, "mixture": {"sources": [{"name": "a", "weight": 1, "conversations": {"train": "/b.json"}}]}}}],
    "data.mixture.sources.conversations.eval": [
      {"data": {"shapes": null, "mixture": {"sources": [{"name": "a", "weight": 1, "conversations": {"train": "/a.json"}}]}}},
      {"data": {"shapes": null, "mixture": {"sources": [{"name": "a", "weight": 1, "conversations": {"train": "/a.json", "eval": "/e.json"}}]}}}],
    "data.mixture.sources.shards.train": [
      {"data": {"shapes": null, "mixture": {"sources": [{"name": "a", "weight": 1, "shards": {"train": "/a.tar"}}]}}},
      {"data": {"shapes": null, "mixture": {"sources": [{"name": "a", "weight": 1, "shards": {"train": "/b.tar"}}]}}}],
    "data.mixture.sources.shards.eval": [
      {"data": {"shapes": null, "mixture": {"sources": [{"name": "a", "weight": 1, "shards": {"train": "/a.tar"}}]}}},
      {"data": {"shapes": null, "mixture": {"sources": [{"name": "a", "weight": 1, "shards": {"train": "/a.tar", "eval": "/e"}}]}}}],
    "data.mixture.sources.shards.shuffle_buffer": [
      {"data": {"shapes": null, "mixture": {"sources": [{"name": "a", "weight": 1, "shards": {"train": "/a.tar", "shuffle_buffer": 100}}]}}},
      {"data": {"shapes": null, "mixture": {"sources": [{"name": "a", "weight": 1, "shards": {"train": "/a.tar", "shuffle_buffer": 200}}]}}}],
    "data.max_text_tokens": [{"data": {"max_text_tokens": 12}}, {"data": {"max_text_tokens": 10}}],
    "data.allow_images_outside": [{"data": {"allow_images_outside": false}},
                                  {"data": {"allow_images_outside": true}}],
    "data.max_images_per_sample": [{"data": {"max_images_per_sample": 1}},
                                   {"data": {"max_images_per_sample": 3}}],
    "data.video_frames": [{"data": {"video_frames": 8}}, {"data": {"video_frames": 4}}],
    "data.pack_tokens": [{"data": {"shapes": {"conversations": true}, "pack_tokens": 32}},
                         {"data": {"shapes": {"conversations": true}, "pack_tokens": 64}}],
    "data.workers": [{"data": {"workers": 1}}, {"data": {"workers": 4}}],
    "data.on_bad_sample": [{"data": {"on_bad_sample": "fail"}},
                           {"data": {"on_bad_sample": "skip"}}],
    "vision.pool": [{"vision": {"pool": "a"}}, {"vision": {"pool": "b"}}],
    "vision.actors": [{"vision": {"actors": 1}}, {"vision": {"actors": 2}}],
    "vision.model.preset": [{"vision": {"model": {"preset": "vit-tiny"}}},
                            {"vision": {"model": {"preset": "vit-s16"}}}],
    "vision.model.image_size": [{"vision": {"model": {"image_size": 32}}},
                                {"vision": {"model": {"image_size": 64}}}],
    "vision.model.channels": {"value": 1, "refused": "vision.model.channels: must be 3 (the datasets produce RGB"},
    "vision.model.patch_size": [{"vision": {"model": {"patch_size": 8}}},
                                {"vision": {"model": {"patch_size": 4}}}],
    "vision.model.hidden": [{"vision": {"model": {"hidden": 64}}}, {"vision": {"model": {"hidden": 32}}}],
    "vision.model.layers": [{"vision": {"model": {"layers": 2}}}, {"vision": {"model": {"layers": 1}}}],
    "vision.model.heads": [{"vision": {"model": {"heads": 4}}}, {"vision": {"model": {"heads": 2}}}],
    "vision.model.mlp_hidden": [{"vision": {"model": {"mlp_hidden": 256}}},
                                {"vision": {"model": {"mlp_hidden": 128}}}],
    "vision.model.positions": [{"vision": {"model": {"positions": "learned"}}},
                               {"vision": {"model": {"positions": "sincos"}}}],
    "vision.model.norm_eps": [{"vision": {"model": {"norm_eps": 1e-6}}},
                              {"vision": {"model": {"norm_eps": 1e-5}}}],
    "vision.model.grid_pinpoints": [
      {"data": {"shapes": null, "conversations": {"train": "/a.json"}},
       "vision": {"model": {"grid_pinpoints": [[32, 64]]}}},
      {"data": {"shapes": null, "conversations": {"train": "/a.json"}},
       "vision": {"model": {"grid_pinpoints": [[64, 32], [64, 64]]}}}],
    "vision.engine": [{"vision": {"engine": {}}},
                      {"vision": {"engine": {"zero_optimization": {"stage": 1}}}}],
    "vision.freeze": [{"vision": {"freeze": []}}, {"vision": {"freeze": ["blocks.0.*"]}}],
    "vision.pretrained": [{"vision": {"model": null, "pretrained": "/towers/a"}},
                          {"vision": {"model": null, "pretrained": "/towers/b"}}],
    "vision.new_projector": [
      {"vision": {"model": null, "pretrained": "/llava", "new_projector": false}},
      {"vision": {"model": null, "pretrained": "/llava", "new_projector": true}}],
    "vision.parallel.tensor": {"refused": "vision.parallel.tensor: is the LLM group's (llm.parallel.tensor)"},
    "vision.parallel.sequence": [{"vision": {"parallel": {"sequence": 1}}},
                                 {"vision": {"parallel": {"sequence": 2}}}],
    "vision.parallel.embeddings": {
      "refused": "vision.parallel.embeddings: is the LLM group's (llm.parallel.embeddings)"},
    "llm.pool": [{"llm": {"pool": "a"}}, {"llm": {"pool": "b"}}],
    "llm.actors": [{"llm": {"actors": 1}}, {"llm": {"actors": 2}}],
    "llm.model.preset": [{"llm": {"model": {"preset": "llm-tiny"}}}, {"llm": {"model": {"preset": "llm-160m"}}}],
    "llm.model.hidden": [{"llm": {"model": {"hidden": 64}}}, {"llm": {"model": {"hidden": 32}}}],
    "llm.model.layers": [{"llm": {"model": {"layers": 2}}}, {"llm": {"model": {"layers": 1}}}],
    "llm.model.heads": [{"llm": {"model": {"heads": 4, "kv_heads": 2}}},
                        {"llm": {"model": {"heads": 2, "kv_heads": 2}}}],
    "llm.model.kv_heads": [{"llm": {"model": {"kv_heads": 4}}}, {"llm": {"model": {"kv_heads": 2}}}],
    "llm.model.mlp_hidden": [{"llm": {"model": {"mlp_hidden": 172}}}, {"llm": {"model": {"mlp_hidden": 128}}}],
    "llm.model.max_seq_len": [{"llm": {"model": {"max_seq_len": 64}}}, {"llm": {"model": {"max_seq_len": 128}}}],
    "llm.model.rope_theta": [{"llm": {"model": {"rope_theta": 10000.0}}},
                             {"llm": {"model": {"rope_theta": 500000.0}}}],
    "llm.model.norm_eps": [{"llm": {"model": {"norm_eps": 1e-5}}}, {"llm": {"model": {"norm_eps": 1e-6}}}],
    "llm.model.tie_embeddings": [{"llm": {"model": {"tie_embeddings": true}}},
                                 {"llm": {"model": {"tie_embeddings": false}}}],
    "llm.engine": [{"llm": {"engine": {}}}, {"llm": {"engine": {"zero_optimization": {"stage": 2}}}}],
    "llm.freeze": [{"llm": {"freeze": []}}, {"llm": {"freeze": ["embed"]}}],
    "llm.pretrained": [{"llm": {"model": null, "pretrained": "/llms/a"}},
                       {"llm": {"model": null, "pretrained": "/llms/b"}}],
    "llm.chat_template": [{"llm": {"model": null, "pretrained": "/llm", "chat_template": "chatml"}},
                          {"llm": {"model": null, "pretrained": "/llm", "chat_template": "llama3"}}],
    "llm.parallel.tensor": [{"llm": {"actors": 2, "parallel": {"tensor": 1}}},
                            {"llm": {"actors": 2, "parallel": {"tensor": 2}}}],
    "llm.parallel.sequence": {"refused": "llm.parallel.sequence: is the vision group's (vision.parallel.sequence)"},
    "llm.parallel.embeddings": [
      {"llm": {"actors": 2, "parallel": {"tensor": 2, "embeddings": "each_rank"}}},
      {"llm": {"actors": 2, "parallel": {"tensor": 2, "embeddings": "broadcast"}}}],
    "schedule.global_batch": [{"schedule": {"global_batch": 8}}, {"schedule": {"global_batch": 16}}],
    "schedule.micro_batches": [{"schedule": {"micro_batches": 2}}, {"schedule": {"micro_batches": 1}}],
    "schedule.steps": [{"schedule": {"steps": 10}}, {"schedule": {"steps": 20}}],
    "schedule.eval_every": [{"schedule": {"eval_every": 0}}, {"schedule": {"eval_every": 5}}],
    "schedule.eval_samples": [{"schedule": {"eval_samples": 0}}, {"schedule": {"eval_samples": 4}}],
    "schedule.checkpoint_every": [{"schedule": {"checkpoint_every": 0}}, {"schedule": {"checkpoint_every": 5}}],
    "schedule.seed": [{"schedule": {"seed": 0}}, {"schedule": {"seed": 5}}],
    "schedule.gradient_clipping": [{"schedule": {"gradient_clipping": 0.0}},
                                   {"schedule": {"gradient_clipping": 1.0}}],
    "schedule.balance": [{"schedule": {"balance": true}}, {"schedule": {"balance": false}}],
    "failure.max_restarts": [{"failure": {"max_restarts": 3}}, {"failure": {"max_restarts": 0}}],
    "failure.snapshot_every": [{"failure": {"snapshot_every": 0}},
                               {"failure": {"snapshot_every": 2}}],
    "checkpoint.async": [{"checkpoint": {"async": false}}, {"checkpoint": {"async": true}}],
    "resume_from": [{"resume_from": "/runs/a/checkpoints/step-000001"}, {"resume_from": ""}],
    "pretrained": [{"vision": {"model": null}, "llm": {"model": null}, "pretrained": "/llava/a"},
                   {"vision": {"model": null}, "llm": {"model": null}, "pretrained": "/llava/b"}]
  })json"));
  return *fields;
}

// The dotted paths of every field of `message` that holds a value (google.protobuf.Struct and
// ListValue are each one).
void LeafPaths(const google::protobuf::Descriptor& message, const std::string& prefix,
               std::vector<std::string>& out) {
  for (int i = 0; i < message.field_count(); ++i) {
    const google::protobuf::FieldDescriptor& field = *message.field(i);
    const std::string path = prefix.empty() ? field.name() : prefix + "." + field.name();
    if (field.type() == google::protobuf::FieldDescriptor::TYPE_MESSAGE &&
        field.message_type()->file()->package() != "google.protobuf") {
      LeafPaths(*field.message_type(), path, out);
    } else {
      out.push_back(path);
    }
  }
}

// The config an actor builds for `spec`: from the file (read once, at the edge), through the
// coordinator's stored JSON and the AssignJobRequest's bytes.
absl::StatusOr<JobConfig> ActorConfig(const json& spec, const std::filesystem::path& dir) {
  const std::string path = (dir / "job.json").string();
  { std::ofstream(path) << spec.dump(2); }
  absl::StatusOr<ResolvedJobSpec> read = ReadJobSpecFile(path);
  if (!read.ok()) return read.status();
  absl::StatusOr<ResolvedJobSpec> stored = ResolveJobSpecJson(read->json, "job-000001");
  if (!stored.ok()) return stored.status();
  tandem::v1::AssignJobRequest sent;
  *sent.mutable_spec() = *stored->spec;
  tandem::v1::AssignJobRequest received;
  if (!received.ParseFromString(sent.SerializeAsString())) return absl::DataLossError("wire");
  absl::StatusOr<ResolvedJobSpec> actor = ResolveJobSpec(received.spec(), "job-000001");
  if (!actor.ok()) return actor.status();
  EXPECT_TRUE(actor->config == read->config) << spec.dump();
  return actor->config;
}

TEST(SpecFields, EveryFieldOfJobProtoReachesTheActorsConfig) {
  std::vector<std::string> paths;
  LeafPaths(*tandem::v1::JobSpec::descriptor(), "", paths);
  for (const auto& [path, _] : Fields().items()) {
    EXPECT_NE(std::find(paths.begin(), paths.end(), path), paths.end())
        << path << " is in Fields() but not a field of tandem.v1.JobSpec";
  }
  const std::filesystem::path dir =
      std::filesystem::path(::testing::TempDir()) / "spec_fields_test";
  std::filesystem::create_directories(dir);
  for (const std::string& path : paths) {
    SCOPED_TRACE(path);
    ASSERT_TRUE(Fields().contains(path))
        << "job.proto's " << path << " has no case in Fields(): give it two valid settings, and "
        << "resolve.cc the line that carries it into JobConfig (docs/design.md §8, \"Adding a spec "
           "field\")";
    const json& field = Fields()[path];
    if (field.is_object()) {
      json spec = BaseSpec();
      std::string pointer = "/" + path;
      std::replace(pointer.begin(), pointer.end(), '.', '/');
      spec[json::json_pointer(pointer)] = field.contains("value")        ? field["value"]
                                          : path.ends_with("embeddings") ? json("each_rank")
                                                                         : json(1);
      EXPECT_THAT(Error(spec), ::testing::HasSubstr(field["refused"].get<std::string>()));
      continue;
    }
    json a = FieldsBase(), b = FieldsBase();
    a.merge_patch(field[0]);
    b.merge_patch(field[1]);
    absl::StatusOr<JobConfig> config_a = ActorConfig(a, dir);
    absl::StatusOr<JobConfig> config_b = ActorConfig(b, dir);
    ASSERT_TRUE(config_a.ok()) << config_a.status();
    ASSERT_TRUE(config_b.ok()) << config_b.status();
    EXPECT_FALSE(*config_a == *config_b)
        << "two settings of " << path << " gave the same JobConfig";
  }
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace tandem::jobspec
