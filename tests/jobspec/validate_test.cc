// Tests for jobspec/validate.cc: every value rule, and the engine blocks (the engine's own errors
// with the group's prefix, and agreement with the schedule), each with its exact message.
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "jobspec/job_spec.h"
#include "tests/jobspec/spec_testing.h"

namespace tandem::jobspec {
namespace {

using ::testing::StartsWith;

TEST(ValidateJobConfig, DefaultJobConfigWithANameIsValid) {
  JobConfig config;
  config.name = "code";
  EXPECT_TRUE(ValidateJobConfig(config).ok()) << ValidateJobConfig(config);
  config.vision.model.output_dim = 32;
  EXPECT_EQ(ValidateJobConfig(config).message(),
            "vision.model.output_dim: must equal llm.model.hidden (64), got 32");
}

TEST(ValidateJobConfig, Name) {
  json spec = BaseSpec();
  spec.erase("name");
  EXPECT_EQ(Error(spec), "job.json: name: is required (it names the run directory)");
  spec["name"] = "my job";
  EXPECT_EQ(Error(spec),
            "job.json: name: must be a file name of the characters A-Z a-z 0-9 . _ - (not \".\" or "
            "\"..\"), got \"my job\"");
  spec["name"] = "..";
  EXPECT_THAT(Error(spec), StartsWith("job.json: name: must be a file name"));
  spec["name"] = std::string(129, 'n');  // a 3 MB name once broke `tandem jobs`
  EXPECT_EQ(Error(spec), "job.json: name: must be at most 128 characters, got 129");
  spec["name"] = std::string(128, 'n');
  ExpectValid(spec.dump());
}

TEST(ValidateJobConfig, PoolNames) {
  json spec = BaseSpec();
  spec["vision"]["pool"] = "";
  EXPECT_EQ(Error(spec), "job.json: vision.pool: must not be empty");
  spec["vision"]["pool"] = std::string(64, 'p');
  EXPECT_EQ(Error(spec), "job.json: vision.pool: must be at most 63 characters, got 64");
  spec["vision"]["pool"] = "vision";
  spec["llm"]["pool"] = "gpu\x1b[31m pool";
  EXPECT_EQ(
      Error(spec),
      "job.json: llm.pool: must be of the characters A-Z a-z 0-9 . _ -, got \"gpu\\x1b[31m pool\"");
}

// Quoted values are escaped and cut short: a megabyte of input is not a megabyte of message.
TEST(ValidateJobConfig, LongValuesAreQuotedCutShort) {
  json spec = BaseSpec();
  spec["name"] = std::string(70, 'a') + " b";
  EXPECT_EQ(Error(spec),
            "job.json: name: must be a file name of the characters A-Z a-z 0-9 . _ - (not \".\" or "
            "\"..\"), got \"" +
                std::string(64, 'a') + "\"... (72 bytes)");
}

TEST(ValidateJobConfig, Freeze) {
  json spec = BaseSpec();
  spec["vision"]["freeze"] = {"blocks.*", ""};
  EXPECT_EQ(Error(spec), "job.json: vision.freeze[1]: must be a non-empty name pattern");
  spec["vision"]["freeze"] = {"*"};
  spec["llm"]["freeze"] = {"*"};
  EXPECT_EQ(Error(spec),
            "job.json: llm.freeze: freezes the whole LLM while vision.freeze freezes the whole "
            "encoder: nothing would train");
  spec["llm"]["freeze"] = {"embed.*"};
  const JobConfig config = ExpectValid(spec.dump());
  EXPECT_TRUE(FreezesWholeGroup(config.vision.freeze));
  EXPECT_FALSE(FreezesWholeGroup(config.llm.freeze));
  spec["vision"]["freeze"] = "*";
  EXPECT_THAT(Error(spec), StartsWith("job.json: vision.freeze: "));
}

TEST(ValidateJobConfig, PretrainedVisionReplacesTheModel) {
  json spec = BaseSpec();
  spec["vision"]["pretrained"] = "towers/clip";
  EXPECT_EQ(Error(spec),
            "job.json: vision.model: must be left out with a pretrained vision tower: the shape "
            "comes from its config.json");
  spec["vision"].erase("model");
  const JobConfig config = ExpectValid(spec.dump());
  EXPECT_EQ(config.vision.pretrained, "towers/clip");
  EXPECT_FALSE(config.vision.new_projector);
}

TEST(ValidateJobConfig, PretrainedLlmAndWholeLlava) {
  json spec = BaseSpec();
  spec["llm"]["pretrained"] = "qwen2";
  EXPECT_EQ(Error(spec),
            "job.json: llm.model: must be left out with a pretrained LLM: the shape comes from its "
            "config.json");
  spec["llm"].erase("model");
  spec["llm"]["chat_template"] = "chatml";
  JobConfig config = ExpectValid(spec.dump());
  EXPECT_EQ(config.llm.pretrained, "qwen2");
  EXPECT_EQ(config.llm.chat_template, "chatml");
  EXPECT_TRUE(config.vision.pretrained.empty());

  spec = BaseSpec();
  spec["llm"]["chat_template"] = "chatml";
  EXPECT_EQ(Error(spec),
            "job.json: llm.chat_template: needs a pretrained LLM (llm.pretrained or pretrained): "
            "Tandem's own LLM reads the \"tandem\" format");
  spec = BaseSpec();
  spec["vision"]["new_projector"] = true;
  EXPECT_EQ(Error(spec),
            "job.json: vision.new_projector: needs a pretrained vision tower (vision.pretrained or "
            "pretrained)");

  // One LLaVA directory for both groups.
  spec = BaseSpec();
  spec["pretrained"] = "llava";
  spec["vision"].erase("model");
  spec["llm"].erase("model");
  spec["vision"]["new_projector"] = true;
  config = ExpectValid(spec.dump());
  EXPECT_EQ(config.vision.pretrained, "llava");
  EXPECT_EQ(config.llm.pretrained, "llava");
  EXPECT_TRUE(config.vision.new_projector);
  spec["llm"]["pretrained"] = "qwen2";
  EXPECT_EQ(Error(spec),
            "job.json: llm.pretrained: must be left out with pretrained, which names both groups' "
            "checkpoint");
}

TEST(ValidateJobConfig, ConversationData) {
  json spec = BaseSpec();
  spec["data"] = {{"conversations", {{"eval", "eval.json"}}}};
  EXPECT_EQ(Error(spec), "job.json: data.conversations.train: is required");
  spec["data"]["conversations"]["train"] = "train.jsonl";
  const JobConfig config = ExpectValid(spec.dump());
  EXPECT_EQ(config.data.kind, data::DataConfig::Kind::kConversations);
  EXPECT_EQ(config.data.conversations.train_path, "train.jsonl");
  EXPECT_EQ(config.data.conversations.eval_path, "eval.json");
}

// Numbers that once took the coordinator down (it reserved memory for every step, or overflowed)
// are refused with their path, or, for intervals, mean "at the end".
TEST(ValidateJobConfig, NumbersHaveUpperBounds) {
  json spec = BaseSpec();
  spec["schedule"]["steps"] = 1000000000000;
  EXPECT_EQ(Error(spec), "job.json: schedule.steps: must be <= 1000000000, got 1000000000000");
  spec = BaseSpec();
  spec["schedule"]["global_batch"] = 1 << 21;
  EXPECT_EQ(Error(spec), "job.json: schedule.global_batch: must be <= 1048576, got 2097152");
  spec = BaseSpec();
  spec["vision"]["actors"] = 5000;
  EXPECT_EQ(Error(spec), "job.json: vision.actors: must be <= 4096, got 5000");
  spec = BaseSpec();
  spec["failure"]["max_restarts"] = 1001;
  EXPECT_EQ(Error(spec), "job.json: failure.max_restarts: must be <= 1000, got 1001");
  spec = BaseSpec();
  spec["data"]["max_text_tokens"] = 2000000;
  EXPECT_EQ(Error(spec), "job.json: data.max_text_tokens: must be <= 1048576, got 2000000");
  spec = BaseSpec();
  spec["data"]["shapes"]["train_samples"] = 2000000000;
  EXPECT_EQ(Error(spec),
            "job.json: data.shapes.train_samples: must be <= 1000000000, got 2000000000");
  // Model sizes: a spec once asked for 2^63-1 layers and the actor grew until the kernel killed it.
  spec = BaseSpec();
  spec["llm"]["model"]["layers"] = 9223372036854775807;
  EXPECT_EQ(Error(spec), "job.json: llm.model.layers: must be <= 1024, got 9223372036854775807");
  spec = BaseSpec();
  spec["vision"]["model"]["image_size"] = 4611686018427387904;  // 2^62, whose patch count overflows
  spec["vision"]["model"]["patch_size"] = 1;
  EXPECT_EQ(Error(spec),
            "job.json: vision.model.image_size: must be <= 8192, got 4611686018427387904");
  spec = BaseSpec();
  spec["llm"]["model"]["hidden"] = 131072;
  EXPECT_EQ(Error(spec), "job.json: llm.model.hidden: must be <= 65536, got 131072");
  spec = BaseSpec();
  spec["schedule"]["eval_every"] = 1;
  spec["schedule"]["checkpoint_every"] = 9223372036854775807;
  EXPECT_EQ(ExpectValid(spec.dump()).schedule.checkpoint_every, 9223372036854775807);
}

TEST(ValidateJobConfig, CountsMustBePositive) {
  json spec = BaseSpec();
  spec["schedule"]["steps"] = 0;
  EXPECT_EQ(Error(spec), "job.json: schedule.steps: must be >= 1, got 0");
  spec = BaseSpec();
  spec["vision"]["actors"] = 0;
  EXPECT_EQ(Error(spec), "job.json: vision.actors: must be >= 1, got 0");
  spec = BaseSpec();
  spec["data"]["shapes"]["train_samples"] = 0;
  EXPECT_EQ(Error(spec), "job.json: data.shapes.train_samples: must be >= 1, got 0");
  spec = BaseSpec();
  spec["schedule"]["eval_every"] = -1;
  EXPECT_EQ(Error(spec), "job.json: schedule.eval_every: must be >= 0, got -1");
  spec = BaseSpec();
  spec["llm"]["model"]["layers"] = 0;
  EXPECT_EQ(Error(spec), "job.json: llm.model.layers: must be >= 1, got 0");
  spec = BaseSpec();
  spec["data"] = {{"jsonl", json::object()}};
  EXPECT_EQ(Error(spec), "job.json: data.jsonl.train: is required");
  spec["data"] = {{"shards", {{"train", "/a.tar"}, {"shuffle_buffer", 0}}}};
  EXPECT_EQ(Error(spec), "job.json: data.shards.shuffle_buffer: must be >= 1, got 0");
  const json shapes = {{"shapes", {{"train_samples", 10}}}};
  const auto source = [&](const std::string& name, double weight) {
    json one = shapes;
    one["name"] = name;
    one["weight"] = weight;
    return one;
  };
  spec["data"] = {{"mixture", {{"sources", json::array()}}}};
  EXPECT_EQ(Error(spec), "job.json: data.mixture.sources: needs at least one source");
  spec["data"]["mixture"]["sources"] = {source("a", 1), source("a b", 1)};
  EXPECT_EQ(Error(spec),
            "job.json: data.mixture.sources[1].name: must be 1 to 64 letters, digits, '-' or '_', "
            "got \"a b\"");
  spec["data"]["mixture"]["sources"] = {source("a", 1), source("a", 1)};
  EXPECT_EQ(Error(spec),
            "job.json: data.mixture.sources[1].name: \"a\" names an earlier source too");
  spec["data"]["mixture"]["sources"] = {source("a", 1), source("b", 0)};
  EXPECT_EQ(Error(spec), "job.json: data.mixture.sources[1].weight: must be > 0, got 0");
  spec["data"]["mixture"]["sources"] = {source("a", 1), {{"name", "b"}, {"weight", 1}}};
  EXPECT_EQ(Error(spec),
            "job.json: data.mixture.sources[1]: needs shapes, jsonl, conversations or shards");
  spec["data"]["mixture"]["sources"] = {source("a", 1),
                                        {{"name", "b"}, {"weight", 1}, {"jsonl", json::object()}}};
  EXPECT_EQ(Error(spec), "job.json: data.mixture.sources[1].jsonl.train: is required");
  spec = BaseSpec();
  spec["data"]["workers"] = 0;
  EXPECT_EQ(Error(spec), "job.json: data.workers: must be >= 1, got 0");
  spec = BaseSpec();
  spec["data"]["on_bad_sample"] = "ignore";
  EXPECT_EQ(Error(spec),
            "job.json: data.on_bad_sample: must be \"fail\" or \"skip\", got \"ignore\"");
  spec = BaseSpec();
  spec["failure"] = {{"max_restarts", -1}};
  EXPECT_EQ(Error(spec), "job.json: failure.max_restarts: must be >= 0, got -1");
  spec["failure"] = {{"snapshot_every", -2}};
  EXPECT_EQ(Error(spec), "job.json: failure.snapshot_every: must be >= 0, got -2");
}

TEST(ValidateJobConfig, GlobalBatchNotDivisibleByMicroBatches) {
  json spec = BaseSpec();
  spec["schedule"]["micro_batches"] = 3;
  EXPECT_EQ(
      Error(spec),
      "job.json: schedule.global_batch: must be a multiple of schedule.micro_batches (3), got 8");
}

TEST(ValidateJobConfig, MicroBatchSmallerThanActors) {
  json spec = BaseSpec();
  spec["llm"]["actors"] = 5;  // micro-batch 8 / 2 = 4
  EXPECT_EQ(
      Error(spec),
      "job.json: schedule.global_batch: a micro-batch (global_batch / micro_batches = 8 / 2 "
      "= 4 samples) must hold at least one sample for every data-parallel rank (llm.actors = 5)");
  // The ranks of one tensor-parallel set share their samples: 8 ranks are 4 replicas of 2.
  spec["llm"]["actors"] = 8;
  spec["llm"]["parallel"] = {{"tensor", 2}};
  const JobConfig config = ExpectValid(spec.dump());
  EXPECT_EQ(config.llm.tensor_parallel, 2);
  EXPECT_EQ(config.llm.replicas(), 4);
  spec["llm"]["actors"] = 10;
  EXPECT_EQ(Error(spec),
            "job.json: schedule.global_batch: a micro-batch (global_batch / micro_batches = 8 / 2 "
            "= 4 samples) must "
            "hold at least one sample for every data-parallel rank (llm.actors / "
            "llm.parallel.tensor = 5)");
}

TEST(ValidateJobConfig, ParallelDegrees) {
  json spec =
      BaseSpec();  // vit-tiny: 4 heads, 16 positions; llm-tiny: 4 heads, 4 KV heads, MLP 172
  spec["vision"]["parallel"] = {{"sequence", 2}};
  EXPECT_EQ(ExpectValid(spec.dump()).vision.sequence_parallel, 2);
  spec["vision"]["parallel"] = {{"sequence", 4}};
  EXPECT_EQ(Error(spec),
            "job.json: vision.parallel.sequence: must divide vision.actors (2) into replicas of 4 "
            "ranks, got 4");
  spec["vision"]["actors"] = 3;
  spec["vision"]["parallel"] = {{"sequence", 3}};
  EXPECT_EQ(Error(spec),
            "job.json: vision.parallel.sequence: must divide vision.model.heads (4), got 3");
  spec["vision"]["model"]["heads"] = 2;
  spec["vision"]["model"]["hidden"] = 64;
  spec["vision"]["actors"] = 6;
  spec["vision"]["parallel"] = {{"sequence", 2}};
  EXPECT_TRUE(ExpectValid(spec.dump()).vision.sequence_parallel == 2);
  spec["vision"]["model"]["image_size"] = 24;  // 9 positions
  EXPECT_EQ(Error(spec),
            "job.json: vision.parallel.sequence: must divide the 9 positions of an image "
            "((image_size / patch_size)^2), got 2");
  spec["vision"]["parallel"] = {{"tensor", 2}};
  EXPECT_THAT(Error(spec), StartsWith("job.json: vision.parallel.tensor: is the LLM group's"));

  spec = BaseSpec();
  spec["llm"]["actors"] = 3;
  spec["llm"]["parallel"] = {{"tensor", 3}};
  EXPECT_EQ(Error(spec), "job.json: llm.parallel.tensor: must divide llm.model.heads (4), got 3");
  spec["llm"]["actors"] = 4;
  spec["llm"]["parallel"] = {{"tensor", 4}};
  spec["llm"]["model"]["heads"] = 8;
  spec["llm"]["model"]["kv_heads"] = 2;  // each KV head serves two ranks
  EXPECT_EQ(ExpectValid(spec.dump()).llm.tensor_parallel, 4);
  spec["llm"]["actors"] = 2;
  spec["llm"]["parallel"] = {{"tensor", 2}};
  spec["llm"]["model"]["heads"] = 4;
  spec["llm"]["model"]["kv_heads"] = 4;
  spec["llm"]["model"]["mlp_hidden"] = 171;
  EXPECT_EQ(Error(spec),
            "job.json: llm.parallel.tensor: must divide llm.model.mlp_hidden (171), got 2");
  spec["llm"]["model"]["mlp_hidden"] = 172;
  spec["llm"]["model"]["hidden"] = 48;
  spec["llm"]["model"]["heads"] = 6;
  spec["llm"]["model"]["kv_heads"] = 3;
  spec["llm"]["actors"] = 4;
  spec["llm"]["parallel"] = {{"tensor", 4}};
  EXPECT_EQ(Error(spec), "job.json: llm.parallel.tensor: must divide llm.model.heads (6), got 4");
  spec["llm"]["actors"] = 2;
  spec["llm"]["parallel"] = {{"tensor", 2}};
  EXPECT_EQ(Error(spec),
            "job.json: llm.parallel.tensor: must divide llm.model.kv_heads (3) or be a multiple of "
            "it (each KV head then serves several ranks), got 2");
  spec["llm"]["parallel"] = {{"sequence", 2}};
  EXPECT_THAT(Error(spec), StartsWith("job.json: llm.parallel.sequence: is the vision group's"));
  spec["llm"]["parallel"] = {{"tensor", 0}};
  EXPECT_THAT(Error(spec), StartsWith("job.json: llm.parallel.tensor: must be"));
}

TEST(ValidateJobConfig, EmbeddingRoute) {
  json spec = BaseSpec();
  EXPECT_EQ(ExpectValid(spec.dump()).llm.embeddings, EmbeddingRoute::kEachRank);
  spec["llm"]["actors"] = 2;
  spec["llm"]["parallel"] = {{"tensor", 2}, {"embeddings", "broadcast"}};
  EXPECT_EQ(ExpectValid(spec.dump()).llm.embeddings, EmbeddingRoute::kBroadcast);
  spec["llm"]["parallel"] = {{"tensor", 2}, {"embeddings", "each_rank"}};
  EXPECT_EQ(ExpectValid(spec.dump()).llm.embeddings, EmbeddingRoute::kEachRank);
  spec["llm"]["parallel"] = {{"tensor", 2}, {"embeddings", "scatter"}};
  EXPECT_EQ(
      Error(spec),
      "job.json: llm.parallel.embeddings: must be \"each_rank\" or \"broadcast\", got \"scatter\"");
  spec = BaseSpec();
  spec["vision"]["parallel"] = {{"embeddings", "broadcast"}};
  EXPECT_THAT(Error(spec), StartsWith("job.json: vision.parallel.embeddings: is the LLM group's"));
}

TEST(ValidateJobConfig, ModelDivisibility) {
  json spec = BaseSpec();
  spec["vision"]["model"]["heads"] = 5;
  EXPECT_EQ(Error(spec), "job.json: vision.model.hidden: must be a multiple of heads (5), got 64");
  spec = BaseSpec();
  spec["vision"]["model"]["image_size"] = 30;
  EXPECT_EQ(Error(spec),
            "job.json: vision.model.image_size: must be a multiple of patch_size (8), got 30");
  spec = BaseSpec();
  spec["llm"]["model"]["heads"] = 3;
  EXPECT_EQ(Error(spec), "job.json: llm.model.hidden: must be a multiple of heads (3), got 64");
  spec = BaseSpec();
  spec["llm"]["model"]["kv_heads"] = 3;
  EXPECT_EQ(Error(spec), "job.json: llm.model.heads: must be a multiple of kv_heads (3), got 4");
  spec = BaseSpec();
  spec["llm"]["model"]["hidden"] = 72;
  spec["llm"]["model"]["heads"] = 8;
  spec["llm"]["model"]["kv_heads"] = 8;
  EXPECT_EQ(Error(spec),
            "job.json: llm.model.hidden: the head size hidden / heads must be even for rotary "
            "positions, got 72 / 8 = 9");
  spec = BaseSpec();
  spec["vision"]["model"]["positions"] = "rope";
  EXPECT_EQ(Error(spec),
            "job.json: vision.model.positions: must be \"learned\" or \"sincos\", got \"rope\"");
  spec = BaseSpec();
  spec["vision"]["model"]["channels"] = 1;
  EXPECT_EQ(Error(spec),
            "job.json: vision.model.channels: must be 3 (the datasets produce RGB images), got 1");
}

TEST(ValidateJobConfig, MaxSeqLenTooSmallNamesBothNumbers) {
  json spec = BaseSpec();
  spec["llm"]["model"]["max_seq_len"] = 20;  // 16 patches + 12 text tokens = 28
  EXPECT_EQ(Error(spec),
            "job.json: llm.model.max_seq_len: must be >= the image features (16) + "
            "data.max_text_tokens (12) = 28, got 20");
  spec["llm"]["model"]["max_seq_len"] = 60;  // 4 images of 16 features + 12 text tokens = 76
  spec["data"]["max_images_per_sample"] = 4;
  EXPECT_EQ(Error(spec),
            "job.json: llm.model.max_seq_len: must be >= the image features "
            "(data.max_images_per_sample 4 x 16) + data.max_text_tokens (12) = 76, got 60");
}

// LLaVA-NeXT's tiles for Tandem's own tower: pinpoints of whole tiles, on conversation files; the
// LLM gains its newline embedding, and its row budget counts the largest layout.
TEST(ValidateJobConfig, GridPinpoints) {
  json spec = BaseSpec();
  spec["llm"]["model"]["max_seq_len"] = 128;
  spec["vision"]["model"]["grid_pinpoints"] = {{32, 64}, {64, 32}};
  EXPECT_EQ(Error(spec),
            "job.json: vision.model.grid_pinpoints: reads each image at its own size: it needs "
            "conversation files (data.conversations) or shards (data.shards)");
  spec["data"] = {{"conversations", {{"train", "train.json"}}}, {"max_text_tokens", 12}};
  const JobConfig config = ExpectValid(spec.dump());
  EXPECT_EQ(config.vision.model.grid_pinpoints,
            (std::vector<data::Resolution>{{32, 64}, {64, 32}}));
  EXPECT_TRUE(config.llm.model.image_newline);
  // The base tile's 16 features, then a tall image's 8 rows of 4 features and a newline.
  EXPECT_EQ(ImagePositions(config.vision.model), 16 + 8 * (4 + 1));
  spec["llm"]["model"]["max_seq_len"] = 60;
  EXPECT_EQ(Error(spec),
            "job.json: llm.model.max_seq_len: must be >= the image features (56) + "
            "data.max_text_tokens (12) = 68, got 60");
  spec["llm"]["model"]["max_seq_len"] = 128;
  spec["vision"]["model"]["grid_pinpoints"] = {{32, 64}, {48, 32}};
  EXPECT_EQ(Error(spec),
            "job.json: vision.model.grid_pinpoints[1]: 48 x 32 is not a multiple of "
            "vision.model.image_size (32) both ways");
  for (const json& bad : {json{{32, 64}, {64}}, json{{32, 64}, {64, 32.5}}, json{{32, 64}, {0, 32}},
                          json{{32, 64}, "64x32"}}) {
    spec["vision"]["model"]["grid_pinpoints"] = bad;
    EXPECT_EQ(Error(spec),
              "job.json: vision.model.grid_pinpoints[1]: must be [height, width], whole pixels "
              "from 1 to 8192")
        << bad;
  }
  spec["vision"]["model"]["grid_pinpoints"] = "32x64";
  EXPECT_EQ(Error(spec),
            "job.json: vision.model.grid_pinpoints: must be an array, got string \"32x64\"");
}

// Packing needs rows that place their images at marks: conversations, or a pretrained LLM.
TEST(ValidateJobConfig, PackTokensNeedsConversations) {
  json spec = BaseSpec();
  spec["data"]["pack_tokens"] = 64;
  EXPECT_EQ(Error(spec),
            "job.json: data.pack_tokens: needs conversations (data.conversations or "
            "data.shapes.conversations) or a pretrained LLM (llm.pretrained): an LLM trained from "
            "scratch reads a caption's image as a prefix of its row, so caption rows cannot be "
            "packed");
  spec["data"]["shapes"]["conversations"] = true;
  EXPECT_EQ(ExpectValid(spec.dump()).data.pack_tokens, 64);
  spec["data"]["pack_tokens"] = 65;
  EXPECT_EQ(Error(spec),
            "job.json: data.pack_tokens: must be <= llm.model.max_seq_len (64), got 65");
}

TEST(ValidateJobConfig, ImageAndFrameCountsAreBounded) {
  json spec = BaseSpec();
  spec["data"]["max_images_per_sample"] = 0;
  EXPECT_EQ(Error(spec), "job.json: data.max_images_per_sample: must be >= 1, got 0");
  spec["data"]["max_images_per_sample"] = 2;
  spec["data"]["video_frames"] = 2000;
  EXPECT_EQ(Error(spec), "job.json: data.video_frames: must be <= 1024, got 2000");
}

TEST(ValidateJobConfig, EvalSamplesBeyondTheHeldOutSet) {
  json spec = BaseSpec();
  spec["schedule"]["eval_samples"] = 11;
  EXPECT_EQ(Error(spec),
            "job.json: schedule.eval_samples: must be <= data.shapes.eval_samples (10), got 11");
}

TEST(ValidateJobConfig, EngineErrorCarriesTheGroupPrefix) {
  json spec = BaseSpec();
  spec["vision"]["engine"] = {{"zero_optimization", {{"stage", 4}}}};
  EXPECT_EQ(Error(spec), "job.json: vision.engine.zero_optimization.stage: must be 0..3, got 4");
  spec = BaseSpec();
  spec["llm"]["engine"] = {{"zero_optimization", {{"foo", 1}}}};
  EXPECT_EQ(Error(spec), "job.json: llm.engine.zero_optimization.foo: unknown key");
}

TEST(ValidateJobConfig, EngineBatchKeysMustAgreeWithTheSchedule) {
  json spec = BaseSpec();  // global_batch 8, micro_batches 2, vision.actors 2, llm.actors 1
  spec["vision"]["engine"] = {{"train_batch_size", 16}};
  EXPECT_EQ(Error(spec),
            "job.json: vision.engine.train_batch_size: must equal schedule.global_batch (8) or be "
            "left out, got 16");
  spec["vision"]["engine"] = {{"gradient_accumulation_steps", 1}};
  EXPECT_EQ(
      Error(spec),
      "job.json: vision.engine.gradient_accumulation_steps: must equal schedule.micro_batches (2) "
      "or be left out, got 1");
  spec["vision"]["engine"] = {{"train_micro_batch_size_per_gpu", 4}};
  EXPECT_EQ(
      Error(spec),
      "job.json: vision.engine.train_micro_batch_size_per_gpu: must equal schedule.global_batch / "
      "schedule.micro_batches / vision.actors = 8 / 2 / 2 = 2 or be left out, got 4");
  // All three in agreement are accepted.
  spec["vision"]["engine"] = {{"train_batch_size", 8},
                              {"gradient_accumulation_steps", 2},
                              {"train_micro_batch_size_per_gpu", 2}};
  ExpectValid(spec.dump());
  // A micro-batch that does not split evenly leaves no right value.
  spec = BaseSpec();
  spec["llm"]["actors"] = 3;
  spec["llm"]["engine"] = {{"train_micro_batch_size_per_gpu", 1}};
  EXPECT_EQ(
      Error(spec),
      "job.json: llm.engine.train_micro_batch_size_per_gpu: must be left out: a micro-batch of 4 "
      "samples (global_batch / micro_batches) does not split evenly over llm.actors = 3, so ranks "
      "get different sizes; got 1");
}

TEST(ValidateJobConfig, GradientReductionMeanIsRejected) {
  json spec = BaseSpec();
  spec["llm"]["engine"] = {{"tandem", {{"gradient_reduction", "mean"}}}};
  EXPECT_EQ(Error(spec),
            "job.json: llm.engine.tandem.gradient_reduction: must be \"sum\" or left out, got "
            "\"mean\": the trainer "
            "normalises the loss over the global batch's tokens, so gradients are summed across "
            "ranks and "
            "micro-batches, never averaged");
  spec["llm"]["engine"] = {{"tandem", {{"gradient_reduction", "sum"}}}};
  ExpectValid(spec.dump());
}

TEST(ValidateJobConfig, WholeModelClippingExcludesPerGroupClipping) {
  json spec = BaseSpec();
  spec["schedule"]["gradient_clipping"] = -1;
  EXPECT_EQ(Error(spec),
            "job.json: schedule.gradient_clipping: must be a finite number >= 0, got -1");
  spec["schedule"]["gradient_clipping"] = 1.5;
  spec["vision"]["engine"] = {{"gradient_clipping", 1.0}};
  EXPECT_EQ(Error(spec),
            "job.json: vision.engine.gradient_clipping: must be 0 or left out when "
            "schedule.gradient_clipping "
            "(1.5) clips by the norm of both groups together, got 1");
  spec["vision"]["engine"] = {{"gradient_clipping", 0.0}};
  ExpectValid(spec.dump());
}

}  // namespace
}  // namespace tandem::jobspec
