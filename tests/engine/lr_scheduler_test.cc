// Tests for engine/lr_scheduler.cc: values at chosen steps, computed by hand from the formulas of
// deepspeed/runtime/lr_schedules.py (NOTE [DeepSpeed step count] in lr_scheduler.cc).
// LearningRate(n) is DeepSpeed's lr after n calls of scheduler.step(), i.e. at last_batch_iteration
// i = n - 1.
#include "engine/lr_scheduler.h"

#include <cmath>

#include "gtest/gtest.h"

namespace tandem::engine {
namespace {

constexpr double kTolerance = 1e-12;

SchedulerConfig Warmup(SchedulerType type, WarmupType warmup_type) {
  SchedulerConfig config;
  config.type = type;
  config.warmup_type = warmup_type;
  return config;
}

TEST(LearningRate, NoneReturnsBaseLrAtEveryStep) {
  SchedulerConfig config;  // kNone
  EXPECT_DOUBLE_EQ(LearningRate(config, 0.25, 0), 0.25);
  EXPECT_DOUBLE_EQ(LearningRate(config, 0.25, 1), 0.25);
  EXPECT_DOUBLE_EQ(LearningRate(config, 0.25, 1000000), 0.25);
}

// WarmupLR, log: min 0.002, max 0.012 (delta 0.01), w = 10.
TEST(LearningRate, WarmupLrLogRisesToMaxThenHolds) {
  SchedulerConfig config = Warmup(SchedulerType::kWarmupLR, WarmupType::kLog);
  config.warmup_min_lr = 0.002;
  config.warmup_max_lr = 0.012;
  config.warmup_num_steps = 10;
  // n = 0: i = -1, not started -> warmup_min_lr = 0.002.
  EXPECT_NEAR(LearningRate(config, 1.0, 0), 0.002, kTolerance);
  // n = 1: i = 0, gamma = ln(1) / ln(10) = 0 -> 0.002.
  EXPECT_NEAR(LearningRate(config, 1.0, 1), 0.002, kTolerance);
  // n = 4: i = 3, gamma = ln(4) / ln(10) = 0.602059991327962 -> 0.002 + 0.01 * 0.602059991327962.
  EXPECT_NEAR(LearningRate(config, 1.0, 4), 0.00802059991327962, kTolerance);
  // n = 10: i = 9, last warmup iteration, gamma = ln(10) / ln(10) = 1 -> 0.012.
  EXPECT_NEAR(LearningRate(config, 1.0, 10), 0.012, kTolerance);
  // n = 11: i = 10 >= w, gamma = 1 -> 0.012.
  EXPECT_NEAR(LearningRate(config, 1.0, 11), 0.012, kTolerance);
  // Far past warmup: still gamma = 1 -> 0.012. base_lr is ignored.
  EXPECT_NEAR(LearningRate(config, 5.0, 1000000), 0.012, kTolerance);
}

// WarmupLR, linear: min 0.002, max 0.012 (delta 0.01), w = 10.
TEST(LearningRate, WarmupLrLinearNeverReachesMaxInsideWarmup) {
  SchedulerConfig config = Warmup(SchedulerType::kWarmupLR, WarmupType::kLinear);
  config.warmup_min_lr = 0.002;
  config.warmup_max_lr = 0.012;
  config.warmup_num_steps = 10;
  // n = 0: i = -1 -> 0.002.
  EXPECT_NEAR(LearningRate(config, 1.0, 0), 0.002, kTolerance);
  // n = 1: i = 0, gamma = 0 / 10 = 0 -> 0.002.
  EXPECT_NEAR(LearningRate(config, 1.0, 1), 0.002, kTolerance);
  // n = 6: i = 5, gamma = 5 / 10 = 0.5 -> 0.002 + 0.005 = 0.007.
  EXPECT_NEAR(LearningRate(config, 1.0, 6), 0.007, kTolerance);
  // n = 10: i = 9, gamma = 9 / 10 = 0.9 -> 0.002 + 0.009 = 0.011.
  EXPECT_NEAR(LearningRate(config, 1.0, 10), 0.011, kTolerance);
  // n = 11: i = 10 >= w, gamma = 1 -> 0.012.
  EXPECT_NEAR(LearningRate(config, 1.0, 11), 0.012, kTolerance);
  EXPECT_NEAR(LearningRate(config, 1.0, 500), 0.012, kTolerance);
}

// DeepSpeed clamps warmup_num_steps to at least 2: w = max(2, 1) = 2.
TEST(LearningRate, WarmupStepsBelowTwoAreClampedToTwo) {
  SchedulerConfig config = Warmup(SchedulerType::kWarmupLR, WarmupType::kLinear);
  config.warmup_min_lr = 0.0;
  config.warmup_max_lr = 0.01;
  for (int64_t steps : {0, 1}) {
    config.warmup_num_steps = steps;
    // n = 1: i = 0, gamma = 0 / 2 -> 0.
    EXPECT_NEAR(LearningRate(config, 1.0, 1), 0.0, kTolerance) << steps;
    // n = 2: i = 1, gamma = 1 / 2 -> 0.005.
    EXPECT_NEAR(LearningRate(config, 1.0, 2), 0.005, kTolerance) << steps;
    // n = 3: i = 2 >= 2, gamma = 1 -> 0.01.
    EXPECT_NEAR(LearningRate(config, 1.0, 3), 0.01, kTolerance) << steps;
  }
}

// WarmupDecayLR, linear: min 0.001, max 0.011 (delta 0.01), w = 10, T = 30 (T - w = 20).
TEST(LearningRate, WarmupDecayLrLinearDecaysToMinAtTotalAndStaysThere) {
  SchedulerConfig config = Warmup(SchedulerType::kWarmupDecayLR, WarmupType::kLinear);
  config.warmup_min_lr = 0.001;
  config.warmup_max_lr = 0.011;
  config.warmup_num_steps = 10;
  config.total_num_steps = 30;
  // n = 0: i = -1 -> 0.001.
  EXPECT_NEAR(LearningRate(config, 1.0, 0), 0.001, kTolerance);
  // n = 6: i = 5, gamma = 5 / 10 = 0.5 -> 0.001 + 0.005 = 0.006.
  EXPECT_NEAR(LearningRate(config, 1.0, 6), 0.006, kTolerance);
  // n = 10: i = 9, gamma = 0.9 -> 0.010.
  EXPECT_NEAR(LearningRate(config, 1.0, 10), 0.010, kTolerance);
  // n = 11: i = 10 = w, gamma = (30 - 10) / 20 = 1 -> 0.011, the peak.
  EXPECT_NEAR(LearningRate(config, 1.0, 11), 0.011, kTolerance);
  // n = 21: i = 20, gamma = (30 - 20) / 20 = 0.5 -> 0.006.
  EXPECT_NEAR(LearningRate(config, 1.0, 21), 0.006, kTolerance);
  // n = 30: i = 29, gamma = (30 - 29) / 20 = 0.05 -> 0.001 + 0.0005 = 0.0015.
  EXPECT_NEAR(LearningRate(config, 1.0, 30), 0.0015, kTolerance);
  // n = 31: i = 30 = T, gamma = 0 / 20 = 0 -> 0.001.
  EXPECT_NEAR(LearningRate(config, 1.0, 31), 0.001, kTolerance);
  // n = 40: i = 39, gamma = max(0, -9 / 20) = 0 -> 0.001.
  EXPECT_NEAR(LearningRate(config, 1.0, 40), 0.001, kTolerance);
}

// WarmupDecayLR, log: same numbers; only the warmup differs.
TEST(LearningRate, WarmupDecayLrLogReachesMaxAtLastWarmupIteration) {
  SchedulerConfig config = Warmup(SchedulerType::kWarmupDecayLR, WarmupType::kLog);
  config.warmup_min_lr = 0.001;
  config.warmup_max_lr = 0.011;
  config.warmup_num_steps = 10;
  config.total_num_steps = 30;
  // n = 0: i = -1 -> 0.001. n = 1: i = 0, ln(1) = 0 -> 0.001.
  EXPECT_NEAR(LearningRate(config, 1.0, 0), 0.001, kTolerance);
  EXPECT_NEAR(LearningRate(config, 1.0, 1), 0.001, kTolerance);
  // n = 4: i = 3, gamma = ln(4) / ln(10) = 0.602059991327962 -> 0.001 + 0.00602059991327962.
  EXPECT_NEAR(LearningRate(config, 1.0, 4), 0.00702059991327962, kTolerance);
  // n = 10: i = 9, gamma = 1 -> 0.011. n = 11: i = 10, gamma = 20 / 20 = 1 -> 0.011.
  EXPECT_NEAR(LearningRate(config, 1.0, 10), 0.011, kTolerance);
  EXPECT_NEAR(LearningRate(config, 1.0, 11), 0.011, kTolerance);
  // n = 21: i = 20, gamma = 10 / 20 -> 0.006. n = 31 and beyond: gamma = 0 -> 0.001.
  EXPECT_NEAR(LearningRate(config, 1.0, 21), 0.006, kTolerance);
  EXPECT_NEAR(LearningRate(config, 1.0, 31), 0.001, kTolerance);
  EXPECT_NEAR(LearningRate(config, 1.0, 1000), 0.001, kTolerance);
}

// WarmupCosineLR, linear: base_lr 0.1, warmup_min_ratio 0.2, cos_min_ratio 0.1, w = 10, T = 30.
TEST(LearningRate, WarmupCosineLrLinearFollowsRatioTimesBaseLr) {
  SchedulerConfig config = Warmup(SchedulerType::kWarmupCosineLR, WarmupType::kLinear);
  config.warmup_min_ratio = 0.2;
  config.cos_min_ratio = 0.1;
  config.warmup_num_steps = 10;
  config.total_num_steps = 30;
  // n = 0: i = -1, not started -> 0.0 (not warmup_min_ratio * base_lr).
  EXPECT_EQ(LearningRate(config, 0.1, 0), 0.0);
  // n = 1: i = 0, r = 0 -> ratio 0.2 -> 0.02.
  EXPECT_NEAR(LearningRate(config, 0.1, 1), 0.02, kTolerance);
  // n = 6: i = 5, r = 0.5 -> 0.2 + 0.5 * 0.8 = 0.6 -> 0.06.
  EXPECT_NEAR(LearningRate(config, 0.1, 6), 0.06, kTolerance);
  // n = 10: i = 9, r = 0.9 -> 0.2 + 0.72 = 0.92 -> 0.092.
  EXPECT_NEAR(LearningRate(config, 0.1, 10), 0.092, kTolerance);
  // n = 11: i = 10, progress = (10 - 10 + 1) / 20 = 0.05; cos(0.05 pi) = 0.987688340595138;
  // (1 + 0.987688340595138) / 2 = 0.993844170297569; 0.1 + 0.9 * 0.993844170297569 =
  // 0.994459753267812 -> 0.0994459753267812.
  EXPECT_NEAR(LearningRate(config, 0.1, 11), 0.0994459753267812, kTolerance);
  // n = 20: i = 19, progress = 10 / 20 = 0.5; cos(pi / 2) = 0 -> 0.1 + 0.9 * 0.5 = 0.55 -> 0.055.
  EXPECT_NEAR(LearningRate(config, 0.1, 20), 0.055, kTolerance);
  // n = 30: i = 29, progress = 20 / 20 = 1; cos(pi) = -1 -> ratio 0.1 -> 0.01.
  EXPECT_NEAR(LearningRate(config, 0.1, 30), 0.01, kTolerance);
  // n = 31: i = 30, progress = min(1, 21 / 20) = 1 -> 0.01; it does not rise again.
  EXPECT_NEAR(LearningRate(config, 0.1, 31), 0.01, kTolerance);
  EXPECT_NEAR(LearningRate(config, 0.1, 50), 0.01, kTolerance);
}

// WarmupCosineLR, log: base_lr 0.1, warmup_min_ratio 0.2, cos_min_ratio 0.1, w = 10, T = 30.
TEST(LearningRate, WarmupCosineLrLogReachesBaseLrAtLastWarmupIteration) {
  SchedulerConfig config = Warmup(SchedulerType::kWarmupCosineLR, WarmupType::kLog);
  config.warmup_min_ratio = 0.2;
  config.cos_min_ratio = 0.1;
  config.warmup_num_steps = 10;
  config.total_num_steps = 30;
  EXPECT_EQ(LearningRate(config, 0.1, 0), 0.0);
  // n = 1: i = 0, r = ln(1) / ln(10) = 0 -> ratio 0.2 -> 0.02.
  EXPECT_NEAR(LearningRate(config, 0.1, 1), 0.02, kTolerance);
  // n = 4: i = 3, r = ln(4) / ln(10) = 0.602059991327962; 0.2 + 0.8 * r = 0.68164799306237 ->
  // 0.068164799306237.
  EXPECT_NEAR(LearningRate(config, 0.1, 4), 0.068164799306237, kTolerance);
  // n = 10: i = 9, r = 1 -> ratio 1 -> 0.1.
  EXPECT_NEAR(LearningRate(config, 0.1, 10), 0.1, kTolerance);
  // n = 11, 20, 30, 31: the cosine part, as in the linear test.
  EXPECT_NEAR(LearningRate(config, 0.1, 11), 0.0994459753267812, kTolerance);
  EXPECT_NEAR(LearningRate(config, 0.1, 20), 0.055, kTolerance);
  EXPECT_NEAR(LearningRate(config, 0.1, 30), 0.01, kTolerance);
  EXPECT_NEAR(LearningRate(config, 0.1, 31), 0.01, kTolerance);
}

// DeepSpeed's defaults: log warmup over 1000 steps from 0 to 0.001.
TEST(LearningRate, DefaultWarmupLrReachesMaxAfterThousandSteps) {
  SchedulerConfig config;
  config.type = SchedulerType::kWarmupLR;
  // n = 100: i = 99, gamma = ln(100) / ln(1000) = 2 / 3 -> 0.001 * 2 / 3.
  EXPECT_NEAR(LearningRate(config, 1.0, 100), 0.001 * 2.0 / 3.0, kTolerance);
  // n = 1000: i = 999, gamma = ln(1000) / ln(1000) = 1 -> 0.001.
  EXPECT_NEAR(LearningRate(config, 1.0, 1000), 0.001, kTolerance);
}

}  // namespace
}  // namespace tandem::engine
