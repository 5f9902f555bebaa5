// Tests for jobspec/memory_estimate.cc: the model-state arithmetic of each precision and ZeRO stage
// (DeepSpeed's 16 and Tandem's 8 bytes a parameter), how activations scale, and the messages that
// name the fields a too-large job comes from. tests/step/stages_test.cc holds the model states
// equal to what built engines allocate.
#include "jobspec/memory_estimate.h"

#include <string>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "jobspec/job_spec.h"
#include "tests/jobspec/spec_testing.h"

namespace tandem::jobspec {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

// llm-tiny with a vocabulary of 100: hidden 64, 2 layers, 4 heads and KV heads, SwiGLU 172, tied.
// Per block 2h + 2h^2 + 2h * 64 + 3h * 172 = 49,536; with the embedding and the final norm 105,536.
constexpr int64_t kLlmTinyParameters = 100 * 64 + 2 * 49536 + 64;

JobConfig Job(const std::string& llm_engine, int llm_actors = 1) {
  json spec = BaseSpec();
  spec["llm"]["engine"] = json::parse(llm_engine);
  spec["llm"]["actors"] = llm_actors;
  JobConfig job = ExpectValid(spec.dump());
  job.llm.model.vocab_size = 100;
  return job;
}

MemoryEstimate Estimate(const JobConfig& job, Role role) {
  absl::StatusOr<MemoryEstimate> estimate = EstimateGroupMemory(job, role);
  EXPECT_TRUE(estimate.ok()) << estimate.status();
  return estimate.ok() ? *estimate : MemoryEstimate{};
}

TEST(MemoryEstimate, ModelStatesFollowThePrecisionAndTheZeroStage) {
  // fp32: weights, gradients and two moments, 16 bytes.
  MemoryEstimate e = Estimate(Job("{}"), Role::kLlm);
  EXPECT_EQ(e.parameters, kLlmTinyParameters);
  EXPECT_EQ(e.model_state_bytes, 16 * kLlmTinyParameters);
  // bf16 with fp32 master and moments: DeepSpeed's 2 + 2 + 12.
  e = Estimate(Job(R"({"bf16": {"enabled": true}})"), Role::kLlm);
  EXPECT_EQ(e.model_state_bytes, 16 * kLlmTinyParameters);
  // Tandem's bf16 master weights, gradients and moments: 8 bytes; Kahan adds 2.
  const std::string full =
      R"("bf16": {"enabled": true, "bf16_master_weights_and_grads": true, "bf16_optimizer_states": true})";
  e = Estimate(Job("{" + full + "}"), Role::kLlm);
  EXPECT_EQ(e.model_state_bytes, 8 * kLlmTinyParameters);
  EXPECT_DOUBLE_EQ(e.state_bytes_per_parameter, 8.0);
  e = Estimate(Job("{" + full + R"(, "tandem": {"bf16_update": "kahan"}})"), Role::kLlm);
  EXPECT_EQ(e.model_state_bytes, 10 * kLlmTinyParameters);
  // Over 4 ranks: stage 1 splits master and moments (12 bytes), stage 2 the gradients too.
  const std::string bf16 = R"("bf16": {"enabled": true})";
  e = Estimate(Job("{" + bf16 + R"(, "zero_optimization": {"stage": 1}})", 4), Role::kLlm);
  EXPECT_EQ(e.model_state_bytes, 4 * kLlmTinyParameters + 12 * kLlmTinyParameters / 4);
  e = Estimate(Job("{" + bf16 + R"(, "zero_optimization": {"stage": 2}})", 4), Role::kLlm);
  EXPECT_EQ(e.model_state_bytes, 2 * kLlmTinyParameters + 14 * kLlmTinyParameters / 4);
  // Stage 3 splits the blocks' weights; the embedding and the final norm stay whole on every rank.
  e = Estimate(Job("{" + bf16 + R"(, "zero_optimization": {"stage": 3}})", 4), Role::kLlm);
  EXPECT_EQ(e.model_state_bytes,
            2 * (100 * 64 + 64) + 2 * (2 * 49536) / 4 + 14 * kLlmTinyParameters / 4);
}

TEST(MemoryEstimate, FrozenParametersKeepOnlyTheirWeights) {
  JobConfig job = Job("{}");
  job.llm.freeze = {"embed.*", "blocks.*"};
  const MemoryEstimate e = Estimate(job, Role::kLlm);
  EXPECT_EQ(e.model_state_bytes, 16 * 64 + 4 * (kLlmTinyParameters - 64));
}

TEST(MemoryEstimate, TensorParallelRanksCountTheirShards) {
  JobConfig job = Job("{}", 2);
  job.llm.tensor_parallel = 2;
  const MemoryEstimate e = Estimate(job, Role::kLlm);
  EXPECT_EQ(e.parameters, kLlmTinyParameters);
  // Everything but the five norms of width 64 is halved.
  EXPECT_EQ(e.rank_parameters, (kLlmTinyParameters - 5 * 64) / 2 + 5 * 64);
  EXPECT_EQ(e.model_state_bytes, 16 * e.rank_parameters);
  // At submit the word tokenizer's vocabulary is not known yet (vocab_size 0): nothing to split.
  job.llm.model.vocab_size = 0;
  EXPECT_EQ(Estimate(job, Role::kLlm).rank_parameters,
            (kLlmTinyParameters - 100 * 64 - 5 * 64) / 2 + 5 * 64);
}

TEST(MemoryEstimate, ActivationsScaleWithTheSamplesOfARank) {
  json spec = BaseSpec();
  spec["schedule"]["global_batch"] = 8;
  const MemoryEstimate four =
      Estimate(ExpectValid(spec.dump()), Role::kVision);  // 2 ranks, 2 micro-batches
  spec["schedule"]["global_batch"] = 16;
  const MemoryEstimate eight = Estimate(ExpectValid(spec.dump()), Role::kVision);
  EXPECT_EQ(four.samples_per_rank, 2);
  EXPECT_EQ(eight.samples_per_rank, 4);
  EXPECT_EQ(eight.activation_bytes, 2 * four.activation_bytes);
  EXPECT_GT(four.activation_bytes, 0);
  EXPECT_EQ(four.positions, 16);  // vit-tiny: 32 px in patches of 8
  // A wholly frozen tower keeps nothing for backward.
  spec["vision"]["freeze"] = json::array({"*"});
  EXPECT_EQ(Estimate(ExpectValid(spec.dump()), Role::kVision).activation_bytes, 0);
}

TEST(MemoryEstimate, ATooLargeJobIsRefusedNamingWhereItsBytesComeFrom) {
  // 3e8 samples: the sampler's order alone is 2.4 GB on every actor.
  json spec = BaseSpec();
  spec["data"]["shapes"]["train_samples"] = 300000000;
  JobConfig job = ExpectValid(spec.dump());
  MemoryEstimate e = Estimate(job, Role::kVision);
  EXPECT_GE(e.data_bytes, 8 * int64_t{300000000});
  absl::Status fits =
      CheckEstimateFits(e, job, int64_t{2} << 30, "pool 'vision' (2 actors, the largest 2.0 GiB)");
  EXPECT_EQ(fits.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(fits.message()),
              StartsWith("vision: needs an estimated 2.2 GiB on each actor: model states "));
  EXPECT_THAT(
      std::string(fits.message()),
      HasSubstr("data 2.2 GiB (data.shapes.train_samples: the order of 300000000 samples)"));
  EXPECT_THAT(
      std::string(fits.message()),
      HasSubstr(", more than the 2.0 GiB of pool 'vision' (2 actors, the largest 2.0 GiB)"));
  EXPECT_TRUE(CheckEstimateFits(e, job, int64_t{3} << 30, "pool 'vision'").ok());
  EXPECT_TRUE(CheckEstimateFits(e, job, 0, "an actor that states no memory").ok());

  // 1024 layers of width 16384: 3.26T parameters, named with their field.
  spec = BaseSpec();
  spec["llm"]["model"] = {{"hidden", 16384}, {"layers", 1024},      {"heads", 128},
                          {"kv_heads", 8},   {"mlp_hidden", 53248}, {"max_seq_len", 4096}};
  job = ExpectValid(spec.dump());
  e = Estimate(job, Role::kLlm);
  fits = CheckEstimateFits(e, job, int64_t{80} << 30, "pool 'llm'");
  EXPECT_EQ(fits.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(fits.message()),
              HasSubstr("(llm.model: 3.26T parameters; llm.engine: 16.0 bytes each at "
                        "ZeRO stage 0 over 1 data-parallel rank)"));
}

TEST(MemoryEstimate, FormatsBytes) {
  EXPECT_EQ(FormatBytes(1536), "2 KiB");
  EXPECT_EQ(FormatBytes(int64_t{300} << 20), "300.0 MiB");
  EXPECT_EQ(FormatBytes(int64_t{3} << 29), "1.5 GiB");
}

}  // namespace
}  // namespace tandem::jobspec
