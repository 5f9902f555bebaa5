// Tests for jobspec/job_spec.cc and resolve.cc: the examples load, presets expand, syntax, schema
// and type errors are InvalidArgument with their exact "<source>: <path>: ..." message, and the
// file reader makes the spec's paths absolute.
#include "jobspec/job_spec.h"

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "jobspec/job_spec_proto.h"
#include "tests/jobspec/spec_testing.h"

namespace tandem::jobspec {
namespace {

using ::testing::StartsWith;

TEST(JobSpec, ParallelShapesExampleLoads) {
  absl::StatusOr<JobConfig> config = ReadConfig(kExamples + "/shapes_vlm_parallel.json");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->vision.sequence_parallel, 2);
  EXPECT_EQ(config->vision.replicas(), 1);
  EXPECT_EQ(config->llm.tensor_parallel, 2);
  EXPECT_EQ(config->llm.replicas(), 1);
}

TEST(JobSpec, ShapesExampleLoads) {
  absl::StatusOr<JobConfig> config = ReadConfig(kExamples + "/shapes_vlm.json");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->name, "shapes-vlm");
  EXPECT_EQ(config->data.kind, data::DataConfig::Kind::kShapes);
  EXPECT_EQ(config->data.shapes.seed, 1u);
  EXPECT_EQ(config->data.shapes.train_samples, 20000);
  EXPECT_EQ(config->data.shapes.eval_samples, 500);
  EXPECT_EQ(config->data.max_text_tokens, 12);
  EXPECT_EQ(config->vision.actors, 2);
  EXPECT_EQ(config->vision.pool, "vision");
  EXPECT_EQ(config->vision.model.preset, "vit-tiny");
  EXPECT_EQ(config->vision.model.output_dim, 64);
  EXPECT_EQ(config->vision.model.positions, "sincos");
  EXPECT_EQ(config->llm.actors, 2);
  EXPECT_EQ(config->llm.model.preset, "llm-tiny");
  EXPECT_EQ(config->schedule.global_batch, 64);
  EXPECT_EQ(config->schedule.steps, 4000);
  EXPECT_EQ(config->schedule.eval_every, 1000);
  EXPECT_EQ(config->schedule.checkpoint_every, 1000);
  json engine = json::parse(config->vision.engine_json);
  EXPECT_EQ(engine["zero_optimization"]["stage"], 1);
  EXPECT_TRUE(engine["zero_optimization"]["stage"].is_number_integer());  // not 1.0
  EXPECT_EQ(engine["scheduler"]["params"]["total_num_steps"], 4000);
  EXPECT_EQ(engine["optimizer"]["params"]["lr"], 1.5e-3);
  EXPECT_EQ(engine["tandem"]["bf16_update"], "kahan");
  EXPECT_EQ(engine["torch_autocast"]["dtype"], "auto");
  EXPECT_EQ(config->llm.engine_json, config->vision.engine_json);
}

// LLaVA's two stages (examples/llava_recipe.sh runs them): the first names the towers of the main
// job's export and trains a new projector alone, the second names the first's export whole.
TEST(JobSpec, LlavaStageExamplesLoad) {
  absl::StatusOr<JobConfig> stage1 = ReadConfig(kExamples + "/llava_stage1.json");
  ASSERT_TRUE(stage1.ok()) << stage1.status();
  EXPECT_EQ(stage1->vision.pretrained, InExamples("../runs/llava/stage0-hf"));
  EXPECT_EQ(stage1->llm.pretrained, stage1->vision.pretrained);
  EXPECT_TRUE(stage1->vision.new_projector);
  EXPECT_THAT(stage1->vision.freeze,
              ::testing::ElementsAre("patch_embed.*", "positions", "blocks.*"));
  EXPECT_THAT(stage1->llm.freeze, ::testing::ElementsAre("*"));
  EXPECT_FALSE(stage1->data.shapes.conversations);

  absl::StatusOr<JobConfig> stage2 = ReadConfig(kExamples + "/llava_stage2.json");
  ASSERT_TRUE(stage2.ok()) << stage2.status();
  EXPECT_EQ(stage2->vision.pretrained, InExamples("../runs/llava/stage1-hf"));
  EXPECT_EQ(stage2->llm.pretrained, InExamples("../runs/llava/stage1-hf"));
  EXPECT_FALSE(stage2->vision.new_projector);
  EXPECT_TRUE(stage2->llm.freeze.empty());
  EXPECT_TRUE(stage2->data.shapes.conversations);
  EXPECT_EQ(stage2->data.max_text_tokens, 40);
}

TEST(JobSpec, JsonlExampleLoadsWithPathsAbsolute) {
  absl::StatusOr<JobConfig> config = ReadConfig(kExamples + "/jsonl_vlm.json");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->data.kind, data::DataConfig::Kind::kJsonl);
  EXPECT_EQ(config->data.jsonl.train_path, InExamples("jsonl/train.jsonl"));
  EXPECT_EQ(config->data.jsonl.eval_path, InExamples("jsonl/eval.jsonl"));
  EXPECT_EQ(config->schedule.global_batch, 8);
  EXPECT_EQ(config->schedule.steps, 50);
  EXPECT_EQ(config->vision.actors, 1);
  EXPECT_EQ(config->llm.actors, 1);
  EXPECT_FALSE(json::parse(config->vision.engine_json).contains("bf16"));
  // Clipped by the norm of both models together, not per group.
  EXPECT_EQ(config->schedule.gradient_clipping, 1.0);
  EXPECT_FALSE(json::parse(config->llm.engine_json).contains("gradient_clipping"));
}

// The mixture example: procedural shapes and the jsonl photos 3:1, the photos' paths absolute.
TEST(JobSpec, MixtureExampleLoadsItsSources) {
  absl::StatusOr<JobConfig> config = ReadConfig(kExamples + "/mixture_vlm.json");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->data.kind, data::DataConfig::Kind::kMixture);
  ASSERT_EQ(config->data.mixture.size(), 2u);
  EXPECT_EQ(config->data.mixture[0].name, "shapes");
  EXPECT_EQ(config->data.mixture[0].weight, 3);
  EXPECT_EQ(config->data.mixture[0].kind, data::DataConfig::Kind::kShapes);
  EXPECT_EQ(config->data.mixture[0].shapes.train_samples, 1024);
  EXPECT_EQ(config->data.mixture[1].kind, data::DataConfig::Kind::kJsonl);
  EXPECT_EQ(config->data.mixture[1].jsonl.train_path, InExamples("jsonl/train.jsonl"));
  EXPECT_EQ(config->data.mixture[1].jsonl.eval_path, InExamples("jsonl/eval.jsonl"));
  EXPECT_FALSE(ConversationData(config->data));  // captions both
}

// The shards example (examples/shards_vlm.sh packs its shards into runs/shards-data/): the
// directories tandem data pack wrote, relative to the spec file, and an empty train is refused.
TEST(JobSpec, ShardsExampleNamesPackedDirectories) {
  absl::StatusOr<JobConfig> config = ReadConfig(kExamples + "/shards_vlm.json");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->data.kind, data::DataConfig::Kind::kShards);
  EXPECT_EQ(config->data.shards.train_pattern, InExamples("../runs/shards-data/train"));
  EXPECT_EQ(config->data.shards.eval_pattern, InExamples("../runs/shards-data/eval"));
  EXPECT_TRUE(ConversationData(config->data));
  EXPECT_EQ(ParseJobSpecJson(R"({"name": "s", "data": {"shards": {"eval": "/e.tar"}}})", "s.json")
                .status()
                .message(),
            "s.json: data.shards.train: is required");
}

// The mixed example (examples/mixed_vlm.sh writes its data into runs/mixed-data/): Tandem's own
// tower with LLaVA-NeXT's tiles, two images a sample, packed rows that hold the longest sample.
TEST(JobSpec, MixedExampleTilesAndPacks) {
  absl::StatusOr<JobConfig> config = ReadConfig(kExamples + "/mixed_vlm.json");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->data.kind, data::DataConfig::Kind::kConversations);
  EXPECT_EQ(config->data.conversations.train_path, InExamples("../runs/mixed-data/train.json"));
  EXPECT_EQ(config->vision.model.grid_pinpoints,
            (std::vector<data::Resolution>{{32, 32}, {32, 64}, {64, 32}}));
  EXPECT_TRUE(config->llm.model.image_newline);
  EXPECT_EQ(config->data.max_images_per_sample, 2);
  EXPECT_EQ(LlmRowPositions(*config), config->data.pack_tokens);
  EXPECT_EQ(config->llm.model.max_seq_len, config->data.pack_tokens);
}

TEST(JobSpec, AbsentFieldsTakeJobConfigDefaults) {
  JobConfig c = ExpectValid(R"({"name": "d", "data": {"shapes": {}}})");
  const JobConfig defaults;
  EXPECT_EQ(c.data.shapes.seed, defaults.data.shapes.seed);
  EXPECT_EQ(c.data.shapes.train_samples, defaults.data.shapes.train_samples);
  EXPECT_EQ(c.data.shapes.eval_samples, defaults.data.shapes.eval_samples);
  EXPECT_EQ(c.data.max_text_tokens, defaults.data.max_text_tokens);
  EXPECT_EQ(c.vision.pool, "vision");
  EXPECT_EQ(c.vision.actors, 1);
  EXPECT_EQ(c.vision.model.preset, "");
  EXPECT_EQ(c.vision.model.image_size, defaults.vision.model.image_size);
  EXPECT_EQ(c.vision.model.positions, "learned");
  EXPECT_EQ(c.vision.engine_json, "{}");
  EXPECT_EQ(c.llm.pool, "llm");
  EXPECT_EQ(c.llm.model.hidden, defaults.llm.model.hidden);
  EXPECT_EQ(c.llm.model.max_seq_len, defaults.llm.model.max_seq_len);
  EXPECT_EQ(c.llm.engine_json, "{}");
  EXPECT_EQ(c.schedule.global_batch, defaults.schedule.global_batch);
  EXPECT_EQ(c.schedule.steps, defaults.schedule.steps);
}

TEST(JobSpec, PresetExpandsAndExplicitFieldsOverride) {
  json spec = BaseSpec();
  spec["vision"]["model"] = {{"preset", "vit-b16"}, {"layers", 3}, {"positions", "sincos"}};
  spec["llm"]["model"] = {
      {"preset", "llm-1b"}, {"layers", 4}, {"tie_embeddings", true}, {"rope_theta", 500000.0}};
  JobConfig c = ExpectValid(spec.dump());
  EXPECT_EQ(c.vision.model.preset, "vit-b16");
  EXPECT_EQ(c.vision.model.image_size, 224);
  EXPECT_EQ(c.vision.model.patch_size, 16);
  EXPECT_EQ(c.vision.model.hidden, 768);
  EXPECT_EQ(c.vision.model.layers, 3);  // overridden
  EXPECT_EQ(c.vision.model.heads, 12);
  EXPECT_EQ(c.vision.model.mlp_hidden, 3072);
  EXPECT_EQ(c.vision.model.positions, "sincos");
  EXPECT_EQ(c.vision.model.output_dim, 2048);  // always the LLM's hidden
  EXPECT_EQ(c.llm.model.preset, "llm-1b");
  EXPECT_EQ(c.llm.model.hidden, 2048);
  EXPECT_EQ(c.llm.model.layers, 4);
  EXPECT_EQ(c.llm.model.heads, 32);
  EXPECT_EQ(c.llm.model.kv_heads, 4);
  EXPECT_EQ(c.llm.model.mlp_hidden, 5632);
  EXPECT_EQ(c.llm.model.max_seq_len, 2048);
  EXPECT_TRUE(c.llm.model.tie_embeddings);
  EXPECT_EQ(c.llm.model.rope_theta, 500000.0);
}

TEST(JobSpec, AcceptsLowerCamelCaseAndIntegersAsStrings) {
  JobConfig c =
      ExpectValid(R"({"name": "c", "data": {"shapes": {"trainSamples": "77"}, "maxTextTokens": 10},
                                "llm": {"model": {"maxSeqLen": 40, "tieEmbeddings": false}},
                                "schedule": {"globalBatch": 1e1, "microBatches": 2}})");
  EXPECT_EQ(c.data.shapes.train_samples, 77);
  EXPECT_EQ(c.data.max_text_tokens, 10);
  EXPECT_EQ(c.llm.model.max_seq_len, 40);
  EXPECT_FALSE(c.llm.model.tie_embeddings);
  EXPECT_EQ(c.schedule.global_batch, 10);
}

TEST(JobSpec, NullMeansAbsent) {
  JobConfig c = ExpectValid(
      R"({"name": "n", "data": {"shapes": {"seed": null}}, "vision": {"engine": null}})");
  EXPECT_EQ(c.data.shapes.seed, 0u);
  EXPECT_EQ(c.vision.engine_json, "{}");
}

TEST(JobSpec, EngineNumbersKeepTheirForm) {
  json spec = BaseSpec();
  spec["vision"]["engine"] = json::parse(
      R"({"zero_optimization": {"stage": 2, "reduce_bucket_size": 5e8},
          "optimizer": {"params": {"lr": 0.1}}})");
  spec["vision"]["engine"]["optimizer"]["type"] = "Adam";
  JobConfig c = ExpectValid(spec.dump());
  EXPECT_EQ(c.vision.engine_json,
            R"({"optimizer":{"params":{"lr":0.1},"type":"Adam"},)"
            R"("zero_optimization":{"reduce_bucket_size":500000000,"stage":2}})");
}

TEST(JobSpec, ProtoFromTheWireResolves) {
  tandem::v1::JobSpec spec;
  spec.set_name("wire");
  spec.mutable_data()->mutable_jsonl()->set_train("/data/train.jsonl");
  spec.mutable_llm()->mutable_model()->set_preset("llm-160m");
  (*spec.mutable_llm()->mutable_engine()->mutable_fields())["gradient_clipping"].set_number_value(
      1.0);
  absl::StatusOr<ResolvedJobSpec> resolved = ResolveJobSpec(spec, "wire");
  ASSERT_TRUE(resolved.ok()) << resolved.status();
  const JobConfig* c = &resolved->config;
  EXPECT_EQ(c->data.kind, data::DataConfig::Kind::kJsonl);
  EXPECT_EQ(c->data.jsonl.train_path, "/data/train.jsonl");
  EXPECT_EQ(c->llm.model.hidden, 768);
  EXPECT_EQ(c->vision.model.output_dim, 768);
  EXPECT_EQ(c->llm.engine_json, R"({"gradient_clipping":1})");

  spec.clear_data();
  EXPECT_EQ(ResolveJobSpec(spec, "wire").status().message(),
            "wire: data: a data source is required: give \"shapes\", \"jsonl\", \"conversations\", "
            "\"shards\" or \"mixture\"");
}

TEST(JobSpecErrors, UnknownFieldAtDepthNamesItsPath) {
  json spec = BaseSpec();
  spec["vision"]["model"]["hiden"] = 3;
  EXPECT_EQ(Error(spec), "job.json: vision.model.hiden: unknown field");
  EXPECT_EQ(Error(R"({"name": "t", "sched": {}})"), "job.json: sched: unknown field");
  spec = BaseSpec();
  spec["data"]["shapes"]["Seed"] = 1;  // names are case-sensitive
  EXPECT_EQ(Error(spec), "job.json: data.shapes.Seed: unknown field");
}

TEST(JobSpecErrors, WrongTypeNamesPathAndValue) {
  json spec = BaseSpec();
  spec["schedule"]["steps"] = "abc";
  EXPECT_EQ(Error(spec), "job.json: schedule.steps: must be an integer, got string \"abc\"");
  spec["schedule"]["steps"] = 1.5;
  EXPECT_EQ(Error(spec), "job.json: schedule.steps: must be an integer, got number 1.5");
  spec = BaseSpec();
  spec["vision"]["actors"] = 3000000000LL;
  EXPECT_EQ(Error(spec),
            "job.json: vision.actors: must be an integer in [-2147483648, 2147483647], got number "
            "3000000000");
  spec = BaseSpec();
  spec["schedule"]["seed"] = -1;
  EXPECT_EQ(
      Error(spec),
      "job.json: schedule.seed: must be an integer in [0, 18446744073709551615], got number -1");
  spec = BaseSpec();
  spec["llm"]["model"]["tie_embeddings"] = "true";
  EXPECT_EQ(Error(spec),
            "job.json: llm.model.tie_embeddings: must be a boolean, got string \"true\"");
  spec = BaseSpec();
  spec["vision"]["model"]["norm_eps"] = "small";
  EXPECT_EQ(Error(spec), "job.json: vision.model.norm_eps: must be a number, got string \"small\"");
  spec = BaseSpec();
  spec["name"] = 5;
  EXPECT_EQ(Error(spec), "job.json: name: must be a string, got number 5");
  spec = BaseSpec();
  spec["vision"] = "big";
  EXPECT_EQ(Error(spec), "job.json: vision: must be an object, got string \"big\"");
  spec = BaseSpec();
  spec["llm"]["engine"] = json::array();
  EXPECT_EQ(Error(spec), "job.json: llm.engine: must be an object, got array");
  EXPECT_EQ(Error("[]"), "job.json: must be an object, got array");
}

TEST(JobSpecErrors, JsonSyntaxErrorHasLineAndColumn) {
  EXPECT_EQ(
      Error("{\n  \"name\": \"t\",\n  \"schedule\": {\"steps\" 3}\n}"),
      "job.json: line 3, column 24: invalid JSON: syntax error while parsing object separator - "
      "unexpected number literal; expected ':'");
  // protobuf would accept a trailing comma; JSON does not.
  EXPECT_THAT(Error("{\"name\": \"t\",\n}"),
              StartsWith("job.json: line 2, column 1: invalid JSON: "));
}

TEST(JobSpecErrors, DuplicateKeyIsAnError) {
  EXPECT_EQ(Error(R"({"name": "a", "name": "b"})"), "job.json: name: duplicate key");
  EXPECT_EQ(Error(R"({"name": "a",
                      "vision": {"engine": {"optimizer": {"type": "Adam", "type": "AdamW"}}}})"),
            "job.json: vision.engine.optimizer.type: duplicate key");
  EXPECT_EQ(Error(R"({"name": "a", "data": {"max_text_tokens": 3, "maxTextTokens": 4}})"),
            "job.json: data.max_text_tokens: duplicate field: \"max_text_tokens\" and "
            "\"maxTextTokens\" are the same field");
}

TEST(JobSpecErrors, DataSourceMissingOrTwo) {
  json spec = BaseSpec();
  spec.erase("data");
  EXPECT_EQ(
      Error(spec),
      "job.json: data: a data source is required: give \"shapes\", \"jsonl\", \"conversations\", "
      "\"shards\" or \"mixture\"");
  spec["data"] = {{"max_text_tokens", 8}};
  EXPECT_EQ(
      Error(spec),
      "job.json: data: a data source is required: give \"shapes\", \"jsonl\", \"conversations\", "
      "\"shards\" or \"mixture\"");
  spec = BaseSpec();
  spec["data"]["jsonl"] = {{"train", "a.jsonl"}};
  EXPECT_EQ(Error(spec),
            "job.json: data: at most one of \"shapes\", \"jsonl\", \"conversations\", "
            "\"shards\", \"mixture\" may be given, "
            "got \"jsonl\" and "
            "\"shapes\"");
}

TEST(JobSpecErrors, UnknownPresetListsKnownOnes) {
  json spec = BaseSpec();
  spec["vision"]["model"]["preset"] = "vit-huge";
  EXPECT_EQ(Error(spec),
            "job.json: vision.model.preset: unknown preset \"vit-huge\"; known: vit-tiny, vit-s16, "
            "vit-b16");
  spec = BaseSpec();
  spec["llm"]["model"]["preset"] = "llama-70b";
  EXPECT_EQ(Error(spec),
            "job.json: llm.model.preset: unknown preset \"llama-70b\"; known: llm-tiny, llm-160m, "
            "llm-1b");
}

TEST(ReadJobSpecFile, MissingFileIsNotFoundNamingIt) {
  const std::string path = ::testing::TempDir() + "/no-such-spec.json";
  absl::StatusOr<ResolvedJobSpec> config = ReadJobSpecFile(path);
  EXPECT_EQ(config.status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(config.status().message(), path + ": no such file");
}

TEST(ReadJobSpecFile, MakesPathsAbsoluteAndPrefixesErrorsWithThePath) {
  const std::filesystem::path dir =
      std::filesystem::path(::testing::TempDir()) / "jobspec_load_test";
  std::filesystem::create_directories(dir);
  const std::string path = (dir / "spec.json").string();
  json spec = BaseSpec();
  spec["data"] = {{"jsonl", {{"train", "data/../train.jsonl"}, {"eval", "/abs/eval.jsonl"}}}};
  spec["resume_from"] = "runs/a/checkpoints/step-000002";
  { std::ofstream(path) << spec.dump(2); }
  absl::StatusOr<ResolvedJobSpec> read = ReadJobSpecFile(path);
  ASSERT_TRUE(read.ok()) << read.status();
  const std::filesystem::path absolute = std::filesystem::absolute(dir).lexically_normal();
  EXPECT_EQ(read->config.data.jsonl.train_path, (absolute / "train.jsonl").string());
  EXPECT_EQ(read->config.data.jsonl.eval_path, "/abs/eval.jsonl");
  EXPECT_EQ(read->config.resume_from, (absolute / "runs/a/checkpoints/step-000002").string());
  // The message and its JSON hold the same absolute paths, and the JSON reads back to the same
  // config.
  EXPECT_EQ(read->spec->data().jsonl().train(), (absolute / "train.jsonl").string());
  absl::StatusOr<ResolvedJobSpec> again = ResolveJobSpecJson(read->json, "job.json");
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_TRUE(again->config == read->config);
  EXPECT_EQ(again->json, read->json);

  json bad = BaseSpec();
  bad["schedule"]["steps"] = 0;
  { std::ofstream(path) << bad.dump(2); }
  EXPECT_EQ(ReadJobSpecFile(path).status().message(),
            path + ": schedule.steps: must be >= 1, got 0");
  std::filesystem::remove_all(dir);
}

TEST(CheckPathsAbsolute, NamesTheFirstRelativePath) {
  tandem::v1::JobSpec spec;
  spec.mutable_data()->mutable_conversations()->set_train("/data/train.json");
  spec.mutable_data()->mutable_conversations()->set_eval("eval.json");
  spec.mutable_llm()->set_pretrained("models/llm");
  EXPECT_EQ(CheckPathsAbsolute(spec, "why").message(),
            "data.conversations.eval: \"eval.json\" is relative; why");
  spec.mutable_data()->mutable_conversations()->set_eval("/data/eval.json");
  EXPECT_EQ(CheckPathsAbsolute(spec, "why").message(),
            "llm.pretrained: \"models/llm\" is relative; why");
  spec.mutable_llm()->set_pretrained("/models/llm");
  EXPECT_TRUE(CheckPathsAbsolute(spec, "why").ok());
  EXPECT_FALSE(spec.has_vision());  // only read
}

}  // namespace
}  // namespace tandem::jobspec
