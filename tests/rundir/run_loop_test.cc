#include "rundir/run_loop.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

namespace tandem::rundir {
namespace {

RunLoopOptions Options(int64_t steps, int64_t eval_every, int64_t checkpoint_every,
                       bool has_eval_set = true) {
  RunLoopOptions options;
  options.steps = steps;
  options.global_batch = 8;
  options.eval_every = eval_every;
  options.checkpoint_every = checkpoint_every;
  options.has_eval_set = has_eval_set;
  return options;
}

std::vector<int64_t> StepsWhere(const RunLoop& loop, bool (RunLoop::*decide)(int64_t) const) {
  std::vector<int64_t> steps;
  for (int64_t step = loop.first_step(); step <= loop.options().steps; ++step) {
    if ((loop.*decide)(step)) steps.push_back(step);
  }
  return steps;
}

TEST(RunLoop, EvaluatesEveryEvalEveryStepsAndAfterTheLast) {
  RunLoop loop(Options(10, 4, 0), 0);
  EXPECT_EQ(StepsWhere(loop, &RunLoop::ShouldEvaluate), (std::vector<int64_t>{4, 8, 10}));
}

TEST(RunLoop, EvaluatesOnlyAfterTheLastStepWhenEvalEveryIsZero) {
  RunLoop loop(Options(10, 0, 0), 0);
  EXPECT_EQ(StepsWhere(loop, &RunLoop::ShouldEvaluate), (std::vector<int64_t>{10}));
}

TEST(RunLoop, NeverEvaluatesWithoutAnEvalSet) {
  RunLoop loop(Options(10, 2, 0, /*has_eval_set=*/false), 0);
  EXPECT_TRUE(StepsWhere(loop, &RunLoop::ShouldEvaluate).empty());
}

TEST(RunLoop, CheckpointsEveryCheckpointEveryStepsAndAfterTheLast) {
  RunLoop loop(Options(10, 0, 3), 0);
  EXPECT_EQ(StepsWhere(loop, &RunLoop::ShouldCheckpoint), (std::vector<int64_t>{3, 6, 9, 10}));
  RunLoop at_end(Options(10, 0, 0), 0);
  EXPECT_EQ(StepsWhere(at_end, &RunLoop::ShouldCheckpoint), (std::vector<int64_t>{10}));
}

TEST(RunLoop, RedrawsThePlotEveryFiftyStepsAndAfterTheLast) {
  RunLoop loop(Options(120, 0, 0), 0);
  EXPECT_EQ(StepsWhere(loop, &RunLoop::ShouldWritePlot), (std::vector<int64_t>{50, 100, 120}));
}

TEST(RunLoop, SegmentsEndAtEvaluationsCheckpointsAndTheLastStep) {
  RunLoop loop(Options(10, 4, 3), 0);
  EXPECT_EQ(loop.SegmentEnd(1), 3);
  EXPECT_EQ(loop.SegmentEnd(4), 4);
  EXPECT_EQ(loop.SegmentEnd(5), 6);
  EXPECT_EQ(loop.SegmentEnd(7), 8);
  EXPECT_EQ(loop.SegmentEnd(9), 9);
  EXPECT_EQ(loop.SegmentEnd(10), 10);
  RunLoop whole(Options(10, 0, 0), 0);
  EXPECT_EQ(whole.SegmentEnd(1), 10);
  RunLoop no_eval_set(Options(10, 4, 0, /*has_eval_set=*/false), 0);
  EXPECT_EQ(no_eval_set.SegmentEnd(1), 10);
}

// An interval past any step the job reaches means "at the end" and must not overflow: the
// coordinator once failed with eval_every 1 and checkpoint_every 2^63 - 1.
TEST(RunLoop, HugeIntervalsMeanTheEndWithoutOverflow) {
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  RunLoop loop(Options(10, 1, kMax), 0);
  EXPECT_EQ(loop.SegmentEnd(1), 1);
  EXPECT_EQ(loop.SegmentEnd(7), 7);
  EXPECT_FALSE(loop.ShouldCheckpoint(9));
  EXPECT_TRUE(loop.ShouldCheckpoint(10));
  RunLoop both(Options(10, kMax - 1, kMax), 0);
  EXPECT_EQ(both.SegmentEnd(2), 10);
  RunLoop far(Options(kMax, kMax - 1, 0), 0);
  EXPECT_EQ(far.SegmentEnd(kMax - 3), kMax - 1);
  EXPECT_EQ(far.SegmentEnd(kMax), kMax);
}

TEST(RunLoop, ResumedRunStartsAfterItsCheckpointAndCountsItsSamples) {
  RunLoop loop(Options(10, 0, 0), 6);
  EXPECT_EQ(loop.first_step(), 7);
  EXPECT_EQ(loop.summary().samples, 6 * 8);
  EXPECT_EQ(loop.summary().steps, 0);
}

TEST(RunLoop, WholeModelGradNormIsTheHypotOfTheGroups) {
  EXPECT_DOUBLE_EQ(WholeModelGradNorm(3, 4), 5);
  EXPECT_DOUBLE_EQ(WholeModelGradNorm(0, 0.5), 0.5);
}

TEST(RunLoop, RecordStepBuildsTheRecordAndCountsTheStep) {
  RunLoop loop(Options(10, 0, 0), 2);
  absl::StatusOr<StepRecord> record =
      loop.RecordStep(3, StepOutcome{1.25, 0.003, 0.002, 0.3, 0.4}, /*step_seconds=*/0.5,
                      /*elapsed_s=*/7.5);
  ASSERT_TRUE(record.ok()) << record.status();
  EXPECT_EQ(record->step, 3);
  EXPECT_EQ(record->loss, 1.25);
  EXPECT_EQ(record->lr, 0.003);
  EXPECT_EQ(record->vision_lr, 0.002);
  EXPECT_EQ(record->vision_grad_norm, 0.3);
  EXPECT_EQ(record->llm_grad_norm, 0.4);
  EXPECT_DOUBLE_EQ(record->grad_norm, 0.5);
  EXPECT_EQ(record->samples_per_s, 16);  // 8 samples in 0.5 s
  EXPECT_EQ(record->elapsed_s, 7.5);
  EXPECT_EQ(loop.summary().steps, 3);
  EXPECT_EQ(loop.summary().samples, 3 * 8);
  EXPECT_EQ(loop.summary().final_loss, 1.25);
}

TEST(RunLoop, ImbalanceIsTheSlowestRankOverTheMeanAndPaddingItsShare) {
  EXPECT_DOUBLE_EQ(Imbalance({1, 2, 3}), 1.5);
  EXPECT_DOUBLE_EQ(Imbalance({2, 2}), 1.0);
  EXPECT_EQ(Imbalance({}), 0);
  EXPECT_EQ(Imbalance({0, 0}), 0);
  RunLoop loop(Options(10, 0, 0), 0);
  StepOutcome outcome{1.0};
  outcome.vision_compute_s = {1, 3};
  outcome.llm_compute_s = {2};
  outcome.vision_planned = {5, 5};  // tiles: even, however uneven the machines were
  outcome.llm_planned = {3e6};
  outcome.llm_positions = 400;
  outcome.llm_padding = 30;
  absl::StatusOr<StepRecord> record = loop.RecordStep(1, outcome, 1, 1);
  ASSERT_TRUE(record.ok()) << record.status();
  EXPECT_DOUBLE_EQ(record->vision_imbalance, 1.5);
  EXPECT_DOUBLE_EQ(record->llm_imbalance, 1.0);
  EXPECT_DOUBLE_EQ(record->vision_planned_imbalance, 1.0);
  EXPECT_DOUBLE_EQ(record->llm_planned_imbalance, 1.0);
  EXPECT_DOUBLE_EQ(record->padding_waste, 0.075);
  EXPECT_EQ(record->vision_compute_s, outcome.vision_compute_s);
}

TEST(RunLoop, NonFiniteLossIsDivergenceAndIsNotCounted) {
  RunLoop loop(Options(10, 0, 0), 0);
  ASSERT_TRUE(loop.RecordStep(1, StepOutcome{2.0}, 1, 1).ok());
  absl::StatusOr<StepRecord> record =
      loop.RecordStep(2, StepOutcome{std::numeric_limits<double>::quiet_NaN()}, 1, 2);
  EXPECT_EQ(record.status().code(), absl::StatusCode::kInternal);
  EXPECT_EQ(record.status().message(),
            "loss is nan at step 2: training diverged (lower the learning rate or enable "
            "gradient_clipping)");
  EXPECT_EQ(loop.summary().steps, 1);
  EXPECT_EQ(loop.summary().final_loss, 2.0);
  EXPECT_EQ(CheckLoss(INFINITY, 9).message(),
            "loss is inf at step 9: training diverged (lower the learning rate or enable "
            "gradient_clipping)");
  EXPECT_TRUE(CheckLoss(0.0, 1).ok());
}

TEST(RunLoop, FinishSetsElapsedAndSamplesOverTrainingTime) {
  RunLoop loop(Options(10, 0, 0), 0);
  ASSERT_TRUE(loop.RecordStep(1, StepOutcome{1.0}, 0.25, 0.25).ok());
  ASSERT_TRUE(loop.RecordStep(2, StepOutcome{0.5}, 0.75, 3.0).ok());
  loop.RecordEval({2, 0.5, 0.75});
  loop.RecordCheckpoint("/r/checkpoints/step-000002");
  const RunSummary& summary = loop.Finish(4.0);
  EXPECT_EQ(summary.elapsed_s, 4.0);
  EXPECT_EQ(summary.samples_per_s, 16);  // 16 samples over 1 s of steps
  EXPECT_TRUE(summary.evaluated);
  EXPECT_EQ(summary.caption_exact_match, 0.5);
  EXPECT_EQ(summary.token_accuracy, 0.75);
  EXPECT_EQ(summary.last_checkpoint, "/r/checkpoints/step-000002");
  EXPECT_EQ(summary.final_loss, 0.5);
}

// Both placements turn the scoring ranks' counts into the record the same way.
TEST(EvalRecordOf, IsExactOverSamplesAndCorrectOverTokens) {
  const EvalRecord eval = EvalRecordOf(5, 8, 6, 40, 35);
  EXPECT_EQ(eval.step, 5);
  EXPECT_EQ(eval.caption_exact_match, 0.75);
  EXPECT_EQ(eval.token_accuracy, 0.875);
  const EvalRecord none = EvalRecordOf(5, 0, 0, 0, 0);
  EXPECT_EQ(none.caption_exact_match, 0.0);
  EXPECT_EQ(none.token_accuracy, 0.0);
}

}  // namespace
}  // namespace tandem::rundir
