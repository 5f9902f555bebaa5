#include "rundir/run_log.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>

#include "rundir/progress.h"

namespace tandem::rundir {
namespace {

using ::testing::HasSubstr;

std::string TempPath(const std::string& name) {
  char pattern[] = "/tmp/tandem-run-log-XXXXXX";
  const char* dir = mkdtemp(pattern);
  return std::string(dir) + "/" + name;
}

TEST(RunLogTest, StepRecordIsOneJsonLineWithDocumentedKeys) {
  StepRecord r{12,         1.5,   0.003, 0.002, 0.75, 0.25, 0.5,   950.5, 4.25,
               {1.5, 0.5}, {2.0}, 1.5,   1.0,   1.25, 1.0,  0.125, 2};
  EXPECT_EQ(
      StepRecordJson(r),
      R"({"step":12,"loss":1.5,"lr":0.003,"vision_lr":0.002,"grad_norm":0.75,"vision_grad_norm":0.25,)"
      R"("llm_grad_norm":0.5,"samples_per_s":950.5,"elapsed_s":4.25,"vision_compute_s":[1.5,0.5],)"
      R"("llm_compute_s":[2.0],"vision_imbalance":1.5,"llm_imbalance":1.0,)"
      R"("vision_planned_imbalance":1.25,"llm_planned_imbalance":1.0,"padding_waste":0.125,)"
      R"("skipped_samples":2})");
}

// A mixture's counts: an object in the sources' order, read back in that order.
TEST(RunLogTest, SamplesBySourceKeepTheSourcesOrder) {
  StepRecord r{4, 1.5, 0.1, 0.1, 1.0, 0, 0, 10, 1};
  r.samples_by_source = {{"zebra", 24}, {"apple", 8}};
  EXPECT_THAT(StepRecordJson(r), HasSubstr(R"("samples_by_source":{"zebra":24,"apple":8})"));
  EXPECT_THAT(StepRecordJson(StepRecord{}), ::testing::Not(HasSubstr("samples_by_source")));
  const std::string path = TempPath("metrics.jsonl");
  {
    auto log = MetricsLog::Open(path);
    ASSERT_TRUE(log.ok() && log->Append(r).ok());
  }
  std::vector<StepRecord> steps;
  std::vector<EvalRecord> evals;
  ASSERT_TRUE(ReadMetrics(path, &steps, &evals).ok());
  ASSERT_EQ(steps.size(), 1u);
  EXPECT_EQ(steps[0].samples_by_source, r.samples_by_source);
}

TEST(RunLogTest, NonFiniteLossIsWrittenAsNull) {
  StepRecord r{3, NAN, 0.1, 0.1, INFINITY, 0, 0, 1, 1};
  EXPECT_THAT(StepRecordJson(r), HasSubstr(R"("loss":null)"));
  EXPECT_THAT(StepRecordJson(r), HasSubstr(R"("grad_norm":null)"));
}

TEST(RunLogTest, EvalRecordNestsUnderEval) {
  EXPECT_EQ(EvalRecordJson({250, 0.5, 0.875}),
            R"({"eval":{"step":250,"caption_exact_match":0.5,"token_accuracy":0.875}})");
}

TEST(RunLogTest, AppendedRecordsReadBack) {
  const std::string path = TempPath("metrics.jsonl");
  {
    auto log = MetricsLog::Open(path);
    ASSERT_TRUE(log.ok()) << log.status();
    ASSERT_TRUE(log->Append(StepRecord{1, 2.0, 0.1, 0.1, 1.0, 0, 0, 10, 0.5}).ok());
    ASSERT_TRUE(
        log
            ->Append(StepRecord{
                2, 1.0, 0.1, 0.1, 1.0, 0, 0, 10, 1.0, {3, 1}, {2, 2}, 1.5, 1, 1.2, 1.1, 0.25, 3})
            .ok());
    ASSERT_TRUE(log->Append(EvalRecord{2, 0.25, 0.5}).ok());
    EXPECT_EQ(log->steps().size(), 2u);
    EXPECT_EQ(log->evals().size(), 1u);
  }
  std::vector<StepRecord> steps;
  std::vector<EvalRecord> evals;
  ASSERT_TRUE(ReadMetrics(path, &steps, &evals).ok());
  ASSERT_EQ(steps.size(), 2u);
  EXPECT_EQ(steps[1].step, 2);
  EXPECT_DOUBLE_EQ(steps[1].loss, 1.0);
  EXPECT_THAT(steps[1].vision_compute_s, ::testing::ElementsAre(3, 1));
  EXPECT_THAT(steps[1].llm_compute_s, ::testing::ElementsAre(2, 2));
  EXPECT_DOUBLE_EQ(steps[1].vision_imbalance, 1.5);
  EXPECT_DOUBLE_EQ(steps[1].vision_planned_imbalance, 1.2);
  EXPECT_DOUBLE_EQ(steps[1].llm_planned_imbalance, 1.1);
  EXPECT_DOUBLE_EQ(steps[1].padding_waste, 0.25);
  EXPECT_EQ(steps[1].skipped_samples, 3);
  EXPECT_EQ(steps[0].skipped_samples, 0);
  EXPECT_TRUE(steps[0].vision_compute_s.empty());
  ASSERT_EQ(evals.size(), 1u);
  EXPECT_DOUBLE_EQ(evals[0].token_accuracy, 0.5);
}

TEST(RunLogTest, ReadMetricsNamesTheBadLine) {
  const std::string path = TempPath("metrics.jsonl");
  std::ofstream(path) << R"({"step":1,"loss":1})"
                      << "\n"
                      << "{broken\n"
                      << R"({"step":2,"loss":1})"
                      << "\n";
  std::vector<StepRecord> steps;
  std::vector<EvalRecord> evals;
  absl::Status status = ReadMetrics(path, &steps, &evals);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(status.message()), HasSubstr("metrics.jsonl:2: not a JSON object"));
}

// What a process killed inside fputs leaves, and what a machine that lost power leaves (ext4 may
// keep the new length with zeros for the data).
TEST(RunLogTest, ATornLastLineIsSkippedAndSaidSo) {
  const std::string record = R"({"step":1,"loss":1})";
  for (const std::string& tail :
       {std::string(R"({"step":2,"lo)"), std::string(40, '\0'), std::string("\0\0\0\n", 4)}) {
    const std::string path = TempPath("metrics.jsonl");
    std::ofstream(path, std::ios::binary) << record << "\n" << tail;
    std::vector<StepRecord> steps;
    std::vector<EvalRecord> evals;
    bool torn = false;
    ASSERT_TRUE(ReadMetrics(path, &steps, &evals, &torn).ok());
    EXPECT_EQ(torn, tail[0] == '{');  // zeros alone are no line at all
    ASSERT_EQ(steps.size(), 1u);
    EXPECT_EQ(steps[0].step, 1);
  }
}

TEST(RunLogTest, AResumeTruncatesATornTailAndAppendsAfterTheKeptRecords) {
  const std::string path = TempPath("metrics.jsonl");
  std::ofstream(path, std::ios::binary) << R"({"step":1,"loss":3})"
                                        << "\n"
                                        << R"({"step":2,"loss":2})"
                                        << "\n"
                                        << R"({"step":3,"lo)";
  {
    auto log = MetricsLog::OpenResumed(path, 2);
    ASSERT_TRUE(log.ok()) << log.status();
    ASSERT_TRUE(log->Append(StepRecord{3, 1.0, 0.1, 0.1, 1.0, 0, 0, 10, 1.0}).ok());
    ASSERT_TRUE(log->Sync().ok());
  }
  std::ifstream in(path);
  std::string first, second, third, fourth;
  std::getline(in, first);
  std::getline(in, second);
  std::getline(in, third);
  EXPECT_EQ(
      first,
      R"({"step":1,"loss":3.0,"lr":0.0,"vision_lr":0.0,"grad_norm":null,"vision_grad_norm":null,"llm_grad_norm":null,"samples_per_s":0.0,"elapsed_s":0.0,)"
      R"("vision_compute_s":[],"llm_compute_s":[],"vision_imbalance":0.0,"llm_imbalance":0.0,)"
      R"("vision_planned_imbalance":0.0,"llm_planned_imbalance":0.0,"padding_waste":0.0,)"
      R"("skipped_samples":0})");
  EXPECT_THAT(third, HasSubstr(R"({"step":3,"loss":1.0,)"));
  EXPECT_FALSE(std::getline(in, fourth));
}

TEST(RunLogTest, OpenFailsWithThePath) {
  auto log = MetricsLog::Open("/nonexistent-dir/metrics.jsonl");
  ASSERT_FALSE(log.ok());
  EXPECT_THAT(std::string(log.status().message()),
              HasSubstr("/nonexistent-dir/metrics.jsonl: cannot open"));
}

TEST(RunLogTest, SvgDrawsLossAndEvaluations) {
  std::vector<StepRecord> steps;
  for (int i = 1; i <= 100; ++i) steps.push_back({i, 5.0 / i, 0, 0, 0, 0, 0, 0, 0});
  const std::string svg = RenderLossSvg("job <a&b>", steps, {{50, 0.5, 0.75}, {100, 0.9, 0.95}});
  EXPECT_THAT(svg, HasSubstr("<svg xmlns=\"http://www.w3.org/2000/svg\""));
  EXPECT_THAT(svg, HasSubstr("job &lt;a&amp;b&gt;"));
  EXPECT_THAT(svg, HasSubstr("training loss (log)"));  // 5.0 .. 0.05 spans two decades
  EXPECT_THAT(svg, HasSubstr("exact match (last 0.900)"));
  EXPECT_THAT(svg, HasSubstr("token accuracy (last 0.950)"));
  EXPECT_EQ(svg.substr(svg.size() - 7), "</svg>\n");
}

TEST(RunLogTest, SvgWithoutEvaluationsHasNoAccuracyAxis) {
  const std::string svg =
      RenderLossSvg("j", {{1, 2.0, 0, 0, 0, 0, 0, 0, 0}, {2, 1.5, 0, 0, 0, 0, 0, 0, 0}}, {});
  EXPECT_THAT(svg, HasSubstr("training loss<"));
  EXPECT_THAT(svg, ::testing::Not(HasSubstr("held-out accuracy")));
}

TEST(ProgressTest, Durations) {
  EXPECT_EQ(FormatDuration(0.4), "0s");
  EXPECT_EQ(FormatDuration(42), "42s");
  EXPECT_EQ(FormatDuration(65), "1m05s");
  EXPECT_EQ(FormatDuration(7380), "2h03m");
  EXPECT_EQ(FormatDuration(NAN), "?");
}

TEST(ProgressTest, LineShowsStepLossRateAndEta) {
  Progress p{120, 1500, 0.81234, 812.44, 14.0, ""};
  EXPECT_EQ(FormatProgressLine(p),
            "step  120/1500  loss 0.8123  812.4 samples/s  elapsed 14s  ETA 2m41s");
  p.step = 1500;
  p.note = "evaluating";
  EXPECT_EQ(FormatProgressLine(p),
            "step 1500/1500  loss 0.8123  812.4 samples/s  elapsed 14s  (evaluating)");
}

}  // namespace
}  // namespace tandem::rundir
