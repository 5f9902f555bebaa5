// Tests for engine_config/config.cc: every accepted key lands in Config, every rejection is
// InvalidArgument with the key path and the reason.
#include "engine_config/config.h"

#include <cstdio>
#include <fstream>
#include <limits>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace tandem::engine_config {
namespace {

using ::testing::HasSubstr;

// Parses `text`, expecting InvalidArgument with `message` somewhere in the error message.
void ExpectInvalid(const std::string& text, const std::string& message) {
  absl::StatusOr<Config> config = ParseConfig(text);
  ASSERT_FALSE(config.ok()) << text;
  EXPECT_EQ(config.status().code(), absl::StatusCode::kInvalidArgument) << config.status();
  EXPECT_THAT(std::string(config.status().message()), HasSubstr(message)) << text;
}

Config ExpectValid(const std::string& text) {
  absl::StatusOr<Config> config = ParseConfig(text);
  EXPECT_TRUE(config.ok()) << config.status() << "\n" << text;
  return config.ok() ? *config : Config{};
}

TEST(Config, EmptyObjectGivesDefaults) {
  Config c = ExpectValid("{}");
  EXPECT_FALSE(c.train_batch_size.has_value());
  EXPECT_FALSE(c.train_micro_batch_size_per_gpu.has_value());
  EXPECT_EQ(c.gradient_accumulation_steps, 1);
  EXPECT_FALSE(c.gradient_accumulation_steps_given);
  EXPECT_EQ(c.optimizer.type, OptimizerType::kAdamW);
  EXPECT_EQ(c.scheduler.type, SchedulerType::kNone);
  EXPECT_EQ(c.zero.stage, 0);
  EXPECT_FALSE(c.bf16_enabled);
  EXPECT_FALSE(c.grad_accum_dtype.has_value());
  EXPECT_EQ(c.communication_data_type, DType::kFloat32);
  EXPECT_EQ(c.steps_per_print, 10);
  EXPECT_FALSE(c.seed.has_value());
  EXPECT_EQ(c.bf16_update, Bf16Update::kNearest);
  EXPECT_EQ(c.gradient_reduction, GradientReduction::kMean);
  EXPECT_EQ(c.collective_timeout_ms, 300000);
}

TEST(Config, TypicalDeepSpeedConfigParsesUnchanged) {
  Config c = ExpectValid(R"({
    "train_batch_size": 64,
    "train_micro_batch_size_per_gpu": 4,
    "gradient_accumulation_steps": 2,
    "gradient_clipping": 1.0,
    "steps_per_print": 100,
    "wall_clock_breakdown": false,
    "zero_allow_untested_optimizer": true,
    "optimizer": {"type": "AdamW",
                  "params": {"lr": 3e-4, "betas": [0.9, 0.95], "eps": 1e-8, "weight_decay": 0.1}},
    "scheduler": {"type": "WarmupDecayLR",
                  "params": {"warmup_min_lr": 0, "warmup_max_lr": 3e-4, "warmup_num_steps": 100,
                             "total_num_steps": 1000}},
    "zero_optimization": {"stage": 2, "overlap_comm": true, "contiguous_gradients": true,
                          "reduce_scatter": true, "allgather_partitions": true,
                          "reduce_bucket_size": 5e8, "allgather_bucket_size": 2e8,
                          "offload_optimizer": {"device": "none", "pin_memory": true}},
    "bf16": {"enabled": true},
    "fp16": {"enabled": false, "loss_scale": 0, "initial_scale_power": 16,
             "loss_scale_window": 1000, "hysteresis": 2, "min_loss_scale": 1},
    "communication_data_type": "bf16",
    "seed": 1234
  })");
  EXPECT_EQ(c.train_batch_size, 64);
  EXPECT_EQ(c.train_micro_batch_size_per_gpu, 4);
  EXPECT_EQ(c.gradient_accumulation_steps, 2);
  EXPECT_TRUE(c.gradient_accumulation_steps_given);
  EXPECT_DOUBLE_EQ(c.gradient_clipping, 1.0);
  EXPECT_EQ(c.steps_per_print, 100);
  EXPECT_EQ(c.optimizer.type, OptimizerType::kAdamW);
  EXPECT_DOUBLE_EQ(c.optimizer.lr, 3e-4);
  EXPECT_DOUBLE_EQ(c.optimizer.beta1, 0.9);
  EXPECT_DOUBLE_EQ(c.optimizer.beta2, 0.95);
  EXPECT_DOUBLE_EQ(c.optimizer.weight_decay, 0.1);
  EXPECT_TRUE(c.optimizer.adam_w_mode);
  EXPECT_EQ(c.scheduler.type, SchedulerType::kWarmupDecayLR);
  EXPECT_DOUBLE_EQ(c.scheduler.warmup_max_lr, 3e-4);
  EXPECT_EQ(c.scheduler.warmup_num_steps, 100);
  EXPECT_EQ(c.scheduler.total_num_steps, 1000);
  EXPECT_EQ(c.zero.stage, 2);
  EXPECT_EQ(c.zero.reduce_bucket_size, 500000000);
  EXPECT_EQ(c.zero.allgather_bucket_size, 200000000);
  EXPECT_TRUE(c.bf16_enabled);
  EXPECT_EQ(c.param_dtype(), DType::kBFloat16);
  EXPECT_TRUE(c.has_separate_master());
  EXPECT_EQ(c.communication_data_type, DType::kBFloat16);
  EXPECT_EQ(c.seed, 1234u);
}

TEST(Config, SyntaxErrorReportsLineAndColumn) {
  absl::StatusOr<Config> c = ParseConfig("{\n  \"stage\": 1,\n  oops\n}");
  ASSERT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(c.status().message()), HasSubstr("line 3, column 3: invalid JSON: "));
  EXPECT_THAT(std::string(c.status().message()), HasSubstr("syntax error"));
}

TEST(Config, SyntaxErrorOnLastLineAfterNewlines) {
  absl::StatusOr<Config> c = ParseConfig("{\n\n  \"a\": 1,\n  \"b\": [1, 2,]\n}");
  ASSERT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(c.status().message()), HasSubstr("line 4, column 14: invalid JSON"));
}

TEST(Config, EmptyTextIsSyntaxErrorAtLineOne) {
  absl::StatusOr<Config> c = ParseConfig("");
  ASSERT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(c.status().message()), HasSubstr("line 1, column 1: invalid JSON"));
}

TEST(Config, TopLevelArrayRejected) {
  ExpectInvalid("[1, 2]", "(top level): must be an object, got array");
}

TEST(Config, DuplicateKeyRejectedWithPath) {
  ExpectInvalid(R"({"zero_optimization": {"stage": 1, "stage": 2}})",
                "zero_optimization.stage: duplicate key");
  ExpectInvalid(R"({"seed": 1, "seed": 2})", "seed: duplicate key");
}

TEST(Config, WarmupLRWarmsUpToOptimizerLrByDefault) {
  Config c = ExpectValid(R"({"optimizer": {"type": "AdamW", "params": {"lr": 0.05}},
                             "scheduler": {"type": "WarmupLR", "params": {"warmup_num_steps": 5}}})");
  EXPECT_DOUBLE_EQ(c.scheduler.warmup_max_lr, 0.05);
  Config given = ExpectValid(R"({"optimizer": {"type": "AdamW", "params": {"lr": 0.05}},
                                 "scheduler": {"type": "WarmupLR", "params": {"warmup_max_lr": 0.2}}})");
  EXPECT_DOUBLE_EQ(given.scheduler.warmup_max_lr, 0.2);
}

TEST(Config, AutocastCombinesWithBf16ModelStates) {
  Config c = ExpectValid(R"({"bf16": {"enabled": true, "bf16_master_weights_and_grads": true,
                                      "bf16_optimizer_states": true},
                             "torch_autocast": {"enabled": true, "dtype": "torch.bfloat16"}})");
  EXPECT_TRUE(c.bf16_enabled);
  EXPECT_TRUE(c.autocast_enabled);
  EXPECT_EQ(c.autocast_dtype, AutocastDType::kBFloat16);
}

TEST(Config, SameKeyInDifferentObjectsIsNotDuplicate) {
  Config c = ExpectValid(R"({"bf16": {"enabled": true}, "torch_autocast": {"enabled": false}})");
  EXPECT_TRUE(c.bf16_enabled);
}

TEST(Config, UnknownTopLevelKeyRejected) {
  ExpectInvalid(R"({"activation_checkpointing": {}})", "activation_checkpointing: unknown key");
}

TEST(Config, UnknownNestedKeyRejected) {
  absl::StatusOr<Config> c = ParseConfig(R"({"zero_optimization": {"stage": 1, "foo": 2}})");
  ASSERT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(c.status().message(), "zero_optimization.foo: unknown key");
}

TEST(Config, WrongJsonTypeRejected) {
  ExpectInvalid(R"({"zero_optimization": {"overlap_comm": "yes"}})",
                "zero_optimization.overlap_comm: must be a boolean, got string \"yes\"");
  ExpectInvalid(R"({"gradient_clipping": true})",
                "gradient_clipping: must be a number, got boolean");
  ExpectInvalid(R"({"zero_optimization": true})",
                "zero_optimization: must be an object, got boolean");
  ExpectInvalid(R"({"communication_data_type": null})",
                "communication_data_type: must be a string, got null");
}

TEST(Config, AutoPlaceholderRejectedWithHint) {
  ExpectInvalid(R"({"train_micro_batch_size_per_gpu": "auto"})",
                "train_micro_batch_size_per_gpu: must be an integer, got string \"auto\" (a "
                "Hugging Face Trainer placeholder");
}

TEST(Config, IntegralFloatAcceptedForIntegerKey) {
  Config c = ExpectValid(R"({"zero_optimization": {"reduce_bucket_size": 5e8, "stage": 3.0}})");
  EXPECT_EQ(c.zero.reduce_bucket_size, 500000000);
  EXPECT_EQ(c.zero.stage, 3);
}

TEST(Config, NonIntegralFloatRejectedForIntegerKey) {
  ExpectInvalid(R"({"zero_optimization": {"reduce_bucket_size": 1.5}})",
                "zero_optimization.reduce_bucket_size: must be an integer, got 1.5");
  ExpectInvalid(R"({"gradient_accumulation_steps": 1e30})",
                "gradient_accumulation_steps: out of range, got 1e+30");
}

TEST(Config, StageOutOfRangeRejected) {
  absl::StatusOr<Config> c = ParseConfig(R"({"zero_optimization": {"stage": 4}})");
  ASSERT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(c.status().message(), "zero_optimization.stage: must be 0..3, got 4");
  ExpectInvalid(R"({"zero_optimization": {"stage": -1}})",
                "zero_optimization.stage: must be 0..3, got -1");
}

TEST(Config, PathPrefixPrependedToErrors) {
  nlohmann::json j = {{"zero_optimization", {{"stage", 7}}}};
  absl::StatusOr<Config> c = ParseConfigJson(j, "llm.engine.");
  ASSERT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(c.status().message(), "llm.engine.zero_optimization.stage: must be 0..3, got 7");

  absl::StatusOr<Config> not_object = ParseConfigJson(nlohmann::json(3), "llm.engine.");
  EXPECT_EQ(not_object.status().message(), "llm.engine: must be an object, got number");
}

TEST(Config, ParseConfigJsonAcceptsDecodedObject) {
  nlohmann::json j = {{"bf16", {{"enabled", true}}}, {"zero_optimization", {{"stage", 3}}}};
  absl::StatusOr<Config> c = ParseConfigJson(j);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_TRUE(c->bf16_enabled);
  EXPECT_EQ(c->zero.stage, 3);
}

TEST(Config, NonFiniteNumberInDecodedObjectRejected) {
  nlohmann::json j = {{"gradient_clipping", std::numeric_limits<double>::infinity()}};
  absl::StatusOr<Config> c = ParseConfigJson(j);
  ASSERT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(c.status().message()), HasSubstr("gradient_clipping: must be finite"));
}

TEST(Config, GradientClippingNegativeRejected) {
  ExpectInvalid(R"({"gradient_clipping": -1})", "gradient_clipping: must be >= 0, got -1");
}

// Optimizer.

TEST(Config, OptimizerTypeCaseInsensitive) {
  EXPECT_EQ(ExpectValid(R"({"optimizer": {"type": "adam"}})").optimizer.type, OptimizerType::kAdam);
  EXPECT_EQ(ExpectValid(R"({"optimizer": {"type": "ADAMW"}})").optimizer.type,
            OptimizerType::kAdamW);
}

TEST(Config, OptimizerUnsupportedTypeRejected) {
  ExpectInvalid(R"({"optimizer": {"type": "Lamb"}})",
                "optimizer.type: must be \"Adam\" or \"AdamW\", got \"Lamb\"");
}

TEST(Config, OptimizerTypeRequired) {
  ExpectInvalid(R"({"optimizer": {"params": {"lr": 1}}})", "optimizer.type: required");
}

TEST(Config, BetasMustBeArrayOfTwoNumbers) {
  for (const char* betas : {"0.9", "[0.9]", "[0.9, 0.99, 0.999]", "[0.9, \"x\"]"}) {
    ExpectInvalid(
        absl::StrCat(R"({"optimizer": {"type": "AdamW", "params": {"betas": )", betas, "}}}"),
        "optimizer.params.betas: must be an array of 2 numbers");
  }
}

TEST(Config, BetaOutOfRangeRejected) {
  ExpectInvalid(R"({"optimizer": {"type": "AdamW", "params": {"betas": [0.9, 1.0]}}})",
                "optimizer.params.betas[1]: must be in [0, 1), got 1");
  ExpectInvalid(R"({"optimizer": {"type": "AdamW", "params": {"betas": [-0.1, 0.9]}}})",
                "optimizer.params.betas[0]: must be in [0, 1), got -0.1");
}

TEST(Config, EpsAndWeightDecayRangesChecked) {
  ExpectInvalid(R"({"optimizer": {"type": "AdamW", "params": {"eps": 0}}})",
                "optimizer.params.eps: must be > 0, got 0");
  ExpectInvalid(R"({"optimizer": {"type": "AdamW", "params": {"weight_decay": -0.01}}})",
                "optimizer.params.weight_decay: must be >= 0, got -0.01");
  ExpectInvalid(R"({"optimizer": {"type": "AdamW", "params": {"lr": -1}}})",
                "optimizer.params.lr: must be >= 0, got -1");
}

TEST(Config, UnknownOptimizerParamRejected) {
  ExpectInvalid(R"({"optimizer": {"type": "Adam", "params": {"amsgrad": true}}})",
                "optimizer.params.amsgrad: unknown key");
}

TEST(Config, AdamWModeFalseRejectedForAdamW) {
  ExpectInvalid(R"({"optimizer": {"type": "AdamW", "params": {"adam_w_mode": false}}})",
                "optimizer.params.adam_w_mode: must be true or absent for AdamW");
}

TEST(Config, AdamWithAdamWModeFalseIsClassicAdam) {
  Config c = ExpectValid(R"({"optimizer": {"type": "Adam", "params": {"adam_w_mode": false}}})");
  EXPECT_EQ(c.optimizer.type, OptimizerType::kAdam);
  EXPECT_FALSE(c.optimizer.adam_w_mode);
  EXPECT_TRUE(ExpectValid(R"({"optimizer": {"type": "Adam"}})").optimizer.adam_w_mode);
}

TEST(Config, TorchAdamAcceptedAndTypeChecked) {
  ExpectValid(R"({"optimizer": {"type": "Adam", "params": {"torch_adam": true}}})");
  ExpectInvalid(R"({"optimizer": {"type": "Adam", "params": {"torch_adam": 1}}})",
                "optimizer.params.torch_adam: must be a boolean, got number");
}

// Scheduler.

TEST(Config, WarmupLRParsesParams) {
  Config c = ExpectValid(R"({"scheduler": {"type": "WarmupLR", "params": {
      "warmup_min_lr": 1e-5, "warmup_max_lr": 1e-3, "warmup_num_steps": 50,
      "warmup_type": "linear", "last_batch_iteration": -1}}})");
  EXPECT_EQ(c.scheduler.type, SchedulerType::kWarmupLR);
  EXPECT_DOUBLE_EQ(c.scheduler.warmup_min_lr, 1e-5);
  EXPECT_DOUBLE_EQ(c.scheduler.warmup_max_lr, 1e-3);
  EXPECT_EQ(c.scheduler.warmup_num_steps, 50);
  EXPECT_EQ(c.scheduler.warmup_type, WarmupType::kLinear);
}

TEST(Config, WarmupLRWithoutParamsKeepsDeepSpeedDefaults) {
  Config c = ExpectValid(R"({"scheduler": {"type": "WarmupLR"}})");
  EXPECT_EQ(c.scheduler.warmup_num_steps, 1000);
  EXPECT_EQ(c.scheduler.warmup_type, WarmupType::kLog);
}

TEST(Config, SchedulerParamOfOtherTypeRejected) {
  ExpectInvalid(R"({"scheduler": {"type": "WarmupLR", "params": {"total_num_steps": 10}}})",
                "scheduler.params.total_num_steps: not a parameter of WarmupLR");
  ExpectInvalid(
      R"({"scheduler": {"type": "WarmupCosineLR", "params": {"total_num_steps": 10,
          "warmup_max_lr": 0.1}}})",
      "scheduler.params.warmup_max_lr: not a parameter of WarmupCosineLR");
  ExpectInvalid(R"({"scheduler": {"type": "WarmupLR", "params": {"cycle_min_lr": 1}}})",
                "scheduler.params.cycle_min_lr: unknown key");
}

TEST(Config, WarmupDecayLRRequiresTotalNumSteps) {
  ExpectInvalid(R"({"scheduler": {"type": "WarmupDecayLR"}})",
                "scheduler.params.total_num_steps: required for WarmupDecayLR");
  ExpectInvalid(R"({"scheduler": {"type": "WarmupDecayLR", "params": {"warmup_num_steps": 5}}})",
                "scheduler.params.total_num_steps: required for WarmupDecayLR");
}

TEST(Config, TotalNumStepsMustExceedWarmup) {
  ExpectInvalid(R"({"scheduler": {"type": "WarmupCosineLR",
                    "params": {"total_num_steps": 100, "warmup_num_steps": 100}}})",
                "scheduler.params.total_num_steps: must be > warmup_num_steps (100), got 100");
}

TEST(Config, WarmupCosineLRParsesParams) {
  Config c = ExpectValid(R"({"scheduler": {"type": "WarmupCosineLR", "params": {
      "total_num_steps": 1000, "warmup_min_ratio": 0.1, "warmup_num_steps": 10,
      "cos_min_ratio": 0.01}}})");
  EXPECT_EQ(c.scheduler.type, SchedulerType::kWarmupCosineLR);
  EXPECT_EQ(c.scheduler.total_num_steps, 1000);
  EXPECT_DOUBLE_EQ(c.scheduler.warmup_min_ratio, 0.1);
  EXPECT_DOUBLE_EQ(c.scheduler.cos_min_ratio, 0.01);
}

TEST(Config, SchedulerBadValuesRejected) {
  ExpectInvalid(R"({"scheduler": {"type": "OneCycle"}})",
                "scheduler.type: must be one of \"WarmupLR\", \"WarmupDecayLR\", "
                "\"WarmupCosineLR\", got \"OneCycle\"");
  ExpectInvalid(R"({"scheduler": {"type": "WarmupLR", "params": {"warmup_type": "cosine"}}})",
                "scheduler.params.warmup_type: must be \"log\" or \"linear\", got \"cosine\"");
  ExpectInvalid(R"({"scheduler": {"type": "WarmupLR", "params": {"last_batch_iteration": 5}}})",
                "scheduler.params.last_batch_iteration: must be -1, got 5");
  ExpectInvalid(R"({"scheduler": {"params": {}}})", "scheduler.type: required");
}

// ZeRO.

TEST(Config, FalseForAlwaysOnZeroSwitchesRejected) {
  ExpectInvalid(R"({"zero_optimization": {"contiguous_gradients": false}})",
                "zero_optimization.contiguous_gradients: false is not supported: Tandem always "
                "keeps gradients in contiguous buffers");
  ExpectInvalid(R"({"zero_optimization": {"reduce_scatter": false}})",
                "zero_optimization.reduce_scatter: false is not supported");
  ExpectInvalid(R"({"zero_optimization": {"allgather_partitions": false}})",
                "zero_optimization.allgather_partitions: false is not supported");
}

TEST(Config, BucketSizesMustBePositive) {
  ExpectInvalid(R"({"zero_optimization": {"reduce_bucket_size": 0}})",
                "zero_optimization.reduce_bucket_size: must be >= 1, got 0");
  ExpectInvalid(R"({"zero_optimization": {"allgather_bucket_size": -5}})",
                "zero_optimization.allgather_bucket_size: must be >= 1, got -5");
}

TEST(Config, OverlapCommStored) {
  EXPECT_FALSE(ExpectValid(R"({"zero_optimization": {"overlap_comm": false}})").zero.overlap_comm);
}

TEST(Config, OffloadToCpuOrNvmeRejected) {
  ExpectInvalid(R"({"zero_optimization": {"offload_optimizer": {"device": "cpu"}}})",
                "zero_optimization.offload_optimizer.device: \"cpu\" offload is not supported yet");
  ExpectInvalid(R"({"zero_optimization": {"offload_param": {"device": "nvme"}}})",
                "zero_optimization.offload_param.device: \"nvme\" offload is not supported yet");
  ExpectInvalid(R"({"zero_optimization": {"offload_param": {"device": "gpu"}}})",
                "zero_optimization.offload_param.device: must be one of \"none\", \"cpu\", "
                "\"nvme\", got \"gpu\"");
  ExpectInvalid(
      R"({"zero_optimization": {"offload_optimizer": {"device": "none", "nvme_path": "/x"}}})",
      "zero_optimization.offload_optimizer.nvme_path: unknown key");
}

TEST(Config, OffloadNoneAccepted) {
  ExpectValid(R"({"zero_optimization": {"stage": 3,
                  "offload_optimizer": {"device": "none"},
                  "offload_param": {"device": "none", "pin_memory": true}}})");
}

TEST(Config, Stage3HintsAcceptedAndValidated) {
  ExpectValid(R"({"zero_optimization": {"stage": 3,
                  "stage3_param_persistence_threshold": 1e5, "stage3_prefetch_bucket_size": 5e7,
                  "stage3_max_live_parameters": 1e9, "stage3_max_reuse_distance": 1e9,
                  "sub_group_size": 1e12, "stage3_gather_16bit_weights_on_model_save": true}})");
  ExpectInvalid(R"({"zero_optimization": {"stage3_max_live_parameters": -1}})",
                "zero_optimization.stage3_max_live_parameters: must be >= 0, got -1");
  ExpectInvalid(R"({"zero_optimization": {"sub_group_size": 0.5}})",
                "zero_optimization.sub_group_size: must be an integer, got 0.5");
}

TEST(Config, GatherWeightsOnSaveFalseRejected) {
  ExpectInvalid(R"({"zero_optimization": {"stage3_gather_16bit_weights_on_model_save": false}})",
                "zero_optimization.stage3_gather_16bit_weights_on_model_save: false is not "
                "supported");
}

// Precision.

TEST(Config, FullBf16Parses) {
  Config c = ExpectValid(R"({"bf16": {"enabled": true, "bf16_master_weights_and_grads": true,
                                      "bf16_optimizer_states": true}})");
  EXPECT_TRUE(c.bf16_master_weights_and_grads);
  EXPECT_TRUE(c.bf16_optimizer_states);
  EXPECT_FALSE(c.has_separate_master());
  EXPECT_EQ(c.grad_dtype(), DType::kBFloat16);
  EXPECT_EQ(c.optimizer_state_dtype(), DType::kBFloat16);
}

TEST(Config, Bf16FlagsRequireEnabled) {
  ExpectInvalid(R"({"bf16": {"bf16_master_weights_and_grads": true}})",
                "bf16.bf16_master_weights_and_grads: requires bf16.enabled = true");
  ExpectInvalid(R"({"bf16": {"enabled": false, "bf16_optimizer_states": true}})",
                "bf16.bf16_optimizer_states: requires bf16.enabled = true");
}

TEST(Config, Bfloat16AliasAccepted) {
  EXPECT_TRUE(ExpectValid(R"({"bfloat16": {"enabled": true}})").bf16_enabled);
  ExpectInvalid(R"({"bfloat16": {"bf16_optimizer_states": true}})",
                "bfloat16.bf16_optimizer_states: requires bfloat16.enabled = true");
}

TEST(Config, BothBf16AliasesRejected) {
  ExpectInvalid(R"({"bf16": {"enabled": true}, "bfloat16": {"enabled": true}})",
                "bfloat16: is an alias of bf16; give only one of them");
}

TEST(Config, Fp16EnabledRejected) {
  ExpectInvalid(R"({"fp16": {"enabled": true}})",
                "fp16.enabled: fp16 needs dynamic loss scaling, which Tandem does not implement; "
                "use bf16");
}

TEST(Config, Fp16AndBf16BothEnabledRejected) {
  ExpectInvalid(R"({"bf16": {"enabled": true}, "fp16": {"enabled": true}})",
                "fp16.enabled: fp16 and bf16 cannot both be enabled");
}

TEST(Config, Fp16DisabledLossScaleKeysTypeChecked) {
  ExpectValid(
      R"({"fp16": {"enabled": false, "auto_cast": false, "consecutive_hysteresis": false}})");
  ExpectInvalid(R"({"fp16": {"enabled": false, "loss_scale_window": 0}})",
                "fp16.loss_scale_window: must be >= 1, got 0");
  ExpectInvalid(R"({"fp16": {"enabled": false, "master_weights": 1}})",
                "fp16.master_weights: unknown key");
}

TEST(Config, GradAccumDtypeFp32WithBf16MasterAccumulatesInFp32) {
  // 8 B/param of state plus 4 B/param of fp32 gradient accumulation (CONFIG.md).
  Config c = ExpectValid(R"({"bf16": {"enabled": true, "bf16_master_weights_and_grads": true,
                             "bf16_optimizer_states": true},
                             "data_types": {"grad_accum_dtype": "fp32"}})");
  EXPECT_FALSE(c.has_separate_master());
  EXPECT_EQ(c.grad_dtype(), DType::kFloat32);
}

TEST(Config, Bf16OptimizerStatesRoundStochasticallyByDefault) {
  EXPECT_EQ(ExpectValid("{}").bf16_optimizer_states_rounding, MomentRounding::kStochastic);
  EXPECT_EQ(ExpectValid(R"({"tandem": {"bf16_optimizer_states_rounding": "nearest"}})")
                .bf16_optimizer_states_rounding,
            MomentRounding::kNearest);
  ExpectInvalid(R"({"tandem": {"bf16_optimizer_states_rounding": "kahan"}})",
                "tandem.bf16_optimizer_states_rounding: must be \"stochastic\" or \"nearest\", "
                "got \"kahan\"");
}

TEST(Config, ParamGroupsParse) {
  Config c = ExpectValid(R"({"tandem": {"no_decay": false, "param_groups": [
      {"params": ["projector.*"], "lr": 1e-3, "weight_decay": 0.0, "betas": [0.9, 0.95], "eps": 1e-6},
      {"params": ["*.bias", "*norm*"]}]}})");
  EXPECT_FALSE(c.no_decay);
  ASSERT_EQ(c.param_groups.size(), 2u);
  const ParamGroupConfig& g = c.param_groups[0];
  EXPECT_EQ(g.path, "tandem.param_groups[0]");
  EXPECT_EQ(g.params, std::vector<std::string>{"projector.*"});
  EXPECT_EQ(g.lr, 1e-3);
  EXPECT_EQ(g.weight_decay, 0.0);
  EXPECT_EQ(g.beta1, 0.9);
  EXPECT_EQ(g.beta2, 0.95);
  EXPECT_EQ(g.eps, 1e-6);
  const ParamGroupConfig& h = c.param_groups[1];
  EXPECT_EQ(h.params, (std::vector<std::string>{"*.bias", "*norm*"}));
  EXPECT_FALSE(h.lr.has_value());
  EXPECT_FALSE(h.weight_decay.has_value());
  EXPECT_TRUE(ExpectValid("{}").no_decay);
}

TEST(Config, ParamGroupsErrorsNameTheEntry) {
  ExpectInvalid(R"({"tandem": {"param_groups": {"params": ["a"]}}})",
                "tandem.param_groups: must be an array of objects, got object");
  ExpectInvalid(R"({"tandem": {"param_groups": [{"lr": 1e-3}]}})",
                "tandem.param_groups[0].params: required");
  ExpectInvalid(R"({"tandem": {"param_groups": [{"params": ["a"]}, {"params": []}]}})",
                "tandem.param_groups[1].params: must be a non-empty array of name patterns");
  ExpectInvalid(R"({"tandem": {"param_groups": [{"params": ["a", 3]}]}})",
                "tandem.param_groups[0].params[1]: must be a non-empty string, got number");
  ExpectInvalid(R"({"tandem": {"param_groups": [{"params": ["a"], "lr": -1}]}})",
                "tandem.param_groups[0].lr: must be >= 0");
  ExpectInvalid(R"({"tandem": {"param_groups": [{"params": ["a"], "betas": [0.9, 1.0]}]}})",
                "tandem.param_groups[0].betas[1]: must be in [0, 1), got 1");
  ExpectInvalid(R"({"tandem": {"param_groups": [{"params": ["a"], "momentum": 0.9}]}})",
                "tandem.param_groups[0].momentum: unknown key");
  ExpectInvalid(R"({"tandem": {"no_decay": "yes"}})", "tandem.no_decay: must be a boolean");
}

TEST(Config, GradAccumDtypeStored) {
  Config c =
      ExpectValid(R"({"bf16": {"enabled": true}, "data_types": {"grad_accum_dtype": "fp32"}})");
  EXPECT_EQ(c.grad_accum_dtype, DType::kFloat32);
  EXPECT_EQ(c.grad_dtype(), DType::kFloat32);
  ExpectInvalid(R"({"data_types": {"grad_accum_dtype": "bf16"}})",
                "data_types.grad_accum_dtype: \"bf16\" requires bf16.enabled = true");
  ExpectInvalid(R"({"bf16": {"enabled": true}, "data_types": {"grad_accum_dtype": "fp16"}})",
                "data_types.grad_accum_dtype: \"fp16\" is not supported");
}

TEST(Config, AutocastDtypeSpellingsAccepted) {
  for (const char* dtype : {"bfloat16", "torch.bfloat16", "bf16"}) {
    Config c = ExpectValid(
        absl::StrCat(R"({"torch_autocast": {"enabled": true, "dtype": ")", dtype, "\"}}"));
    EXPECT_TRUE(c.autocast_enabled);
    EXPECT_EQ(c.autocast_dtype, AutocastDType::kBFloat16);
  }
}

TEST(Config, AutocastDtypeAutoIsKept) {
  Config c = ExpectValid(R"({"torch_autocast": {"enabled": true, "dtype": "auto"}})");
  EXPECT_TRUE(c.autocast_enabled);
  EXPECT_EQ(c.autocast_dtype, AutocastDType::kAuto);
}

TEST(Config, AutocastRejections) {
  ExpectInvalid(R"({"torch_autocast": {"enabled": true, "dtype": "torch.float16"}})",
                "torch_autocast.dtype: fp16 autocast needs loss scaling");
  ExpectInvalid(R"({"torch_autocast": {"enabled": true, "dtype": "float32"}})",
                "torch_autocast.dtype: must be one of");
  ExpectInvalid(
      R"({"torch_autocast": {"enabled": true, "lower_precision_safe_modules": ["torch.nn.Linear"]}})",
      "torch_autocast.lower_precision_safe_modules: not supported");
}

TEST(Config, CommunicationDataType) {
  EXPECT_EQ(ExpectValid(R"({"communication_data_type": "fp32"})").communication_data_type,
            DType::kFloat32);
  ExpectInvalid(R"({"communication_data_type": "fp16"})",
                "communication_data_type: \"fp16\" is not supported; use \"fp32\" or \"bf16\"");
  ExpectInvalid(R"({"communication_data_type": "int8"})",
                "communication_data_type: must be \"fp32\" or \"bf16\", got \"int8\"");
}

// Miscellaneous top-level keys.

TEST(Config, StepsPerPrintAndSeedRanges) {
  ExpectInvalid(R"({"steps_per_print": 0})", "steps_per_print: must be >= 1, got 0");
  ExpectInvalid(R"({"seed": -1})", "seed: must be >= 0, got -1");
  ExpectInvalid(R"({"seed": 1.5})", "seed: must be an integer, got 1.5");
  EXPECT_EQ(ExpectValid(R"({"seed": 18446744073709551615})").seed, 18446744073709551615u);
  EXPECT_EQ(ExpectValid(R"({"seed": 0})").seed, 0u);
}

TEST(Config, NoEffectFlagsAccepted) {
  ExpectValid(R"({"wall_clock_breakdown": true, "zero_allow_untested_optimizer": true,
                  "prescale_gradients": false, "gradient_predivide_factor": 1.0})");
  ExpectInvalid(R"({"wall_clock_breakdown": 1})",
                "wall_clock_breakdown: must be a boolean, got number");
}

// Tandem scales before the reduction, which is what prescale_gradients: true asks for.
TEST(Config, PrescaleAcceptedAndPredivideRejected) {
  ExpectValid(R"({"prescale_gradients": true})");
  ExpectInvalid(R"({"prescale_gradients": "yes"})",
                "prescale_gradients: must be a boolean, got string");
  ExpectInvalid(R"({"gradient_predivide_factor": 2})",
                "gradient_predivide_factor: must be 1.0, got 2");
}

// Batch arithmetic.

TEST(Config, BatchInconsistentWithAnyWorldSizeRejected) {
  ExpectInvalid(R"({"train_batch_size": 12, "train_micro_batch_size_per_gpu": 4,
                    "gradient_accumulation_steps": 2})",
                "train_batch_size: must be a multiple of train_micro_batch_size_per_gpu * "
                "gradient_accumulation_steps (4 * 2), got 12");
  ExpectInvalid(
      R"({"train_batch_size": 10, "train_micro_batch_size_per_gpu": 4})",
      "train_batch_size: must be a multiple of train_micro_batch_size_per_gpu (4), got 10");
  ExpectInvalid(R"({"train_batch_size": 9, "gradient_accumulation_steps": 2})",
                "train_batch_size: must be a multiple of gradient_accumulation_steps (2), got 9");
}

TEST(Config, GradientAccumulationLeftToEngineWhenAbsent) {
  Config c = ExpectValid(R"({"train_batch_size": 32, "train_micro_batch_size_per_gpu": 4})");
  EXPECT_EQ(c.train_batch_size, 32);
  EXPECT_EQ(c.train_micro_batch_size_per_gpu, 4);
  EXPECT_EQ(c.gradient_accumulation_steps, 1);
  EXPECT_FALSE(c.gradient_accumulation_steps_given);
}

TEST(Config, BatchSizesMustBePositive) {
  ExpectInvalid(R"({"train_batch_size": 0})", "train_batch_size: must be >= 1, got 0");
  ExpectInvalid(R"({"gradient_accumulation_steps": 0})",
                "gradient_accumulation_steps: must be >= 1, got 0");
}

// Tandem extensions.

TEST(Config, TandemExtensionsParse) {
  Config c = ExpectValid(R"({"bf16": {"enabled": true, "bf16_master_weights_and_grads": true},
                             "tandem": {"bf16_update": "stochastic", "gradient_reduction": "sum",
                                        "collective_timeout_s": 2.5}})");
  EXPECT_EQ(c.bf16_update, Bf16Update::kStochastic);
  EXPECT_EQ(c.gradient_reduction, GradientReduction::kSum);
  EXPECT_EQ(c.collective_timeout_ms, 2500);
}

TEST(Config, CompensatedBf16UpdateRequiresBf16Master) {
  ExpectInvalid(R"({"bf16": {"enabled": true}, "tandem": {"bf16_update": "kahan"}})",
                "tandem.bf16_update: \"kahan\" requires bf16.bf16_master_weights_and_grads = true");
  EXPECT_EQ(ExpectValid(R"({"tandem": {"bf16_update": "nearest"}})").bf16_update,
            Bf16Update::kNearest);
}

TEST(Config, TandemBadValuesRejected) {
  ExpectInvalid(R"({"tandem": {"gradient_reduction": "avg"}})",
                "tandem.gradient_reduction: must be \"mean\" or \"sum\", got \"avg\"");
  ExpectInvalid(R"({"tandem": {"bf16_update": "round"}})",
                "tandem.bf16_update: must be one of \"nearest\", \"kahan\", \"stochastic\"");
  ExpectInvalid(R"({"tandem": {"collective_timeout_s": 0}})",
                "tandem.collective_timeout_s: must be > 0, got 0");
  ExpectInvalid(R"({"tandem": {"collective_timeout_s": 0.0001}})",
                "tandem.collective_timeout_s: must be in [0.001, 1e9], got 0.0001");
  ExpectInvalid(R"({"tandem": {"stage": 1}})", "tandem.stage: unknown key");
}

// Files.

std::string WriteTempFile(const std::string& name, const std::string& text) {
  std::string path = absl::StrCat(::testing::TempDir(), "/", name);
  std::ofstream(path) << text;
  return path;
}

TEST(Config, LoadConfigFileMissingIsNotFound) {
  std::string path = absl::StrCat(::testing::TempDir(), "/no_such_config.json");
  absl::StatusOr<Config> c = LoadConfigFile(path);
  EXPECT_EQ(c.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(c.status().message()), HasSubstr(path));
}

TEST(Config, LoadConfigFileErrorsNameTheFile) {
  std::string path = WriteTempFile("bad_stage.json", R"({"zero_optimization": {"stage": 9}})");
  absl::StatusOr<Config> c = LoadConfigFile(path);
  EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(c.status().message(),
            absl::StrCat(path, ": zero_optimization.stage: must be 0..3, got 9"));

  std::string broken =
      WriteTempFile("broken.json", "{\n  \"seed\": 1\n  \"steps_per_print\": 2\n}");
  absl::StatusOr<Config> b = LoadConfigFile(broken);
  EXPECT_EQ(b.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(b.status().message()),
              HasSubstr(absl::StrCat(broken, ": line 3, column 19: invalid JSON")));
}

TEST(Config, LoadConfigFileReadsValidFile) {
  std::string path = WriteTempFile("good.json", R"({"zero_optimization": {"stage": 2}})");
  absl::StatusOr<Config> c = LoadConfigFile(path);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->zero.stage, 2);
}

TEST(Config, DTypeNameNamesBothDtypes) {
  EXPECT_STREQ(DTypeName(DType::kFloat32), "fp32");
  EXPECT_STREQ(DTypeName(DType::kBFloat16), "bf16");
}

}  // namespace
}  // namespace tandem::engine_config
