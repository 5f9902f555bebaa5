// The per-step losses a run directory's metrics.jsonl records, for the equivalence tests.
#pragma once

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "rundir/run_log.h"

namespace tandem::testing {

inline std::vector<double> Losses(const std::string& run_dir) {
  std::vector<rundir::StepRecord> steps;
  std::vector<rundir::EvalRecord> evals;
  EXPECT_TRUE(rundir::ReadMetrics(run_dir + "/metrics.jsonl", &steps, &evals).ok()) << run_dir;
  std::vector<double> losses;
  for (const auto& s : steps) losses.push_back(s.loss);
  return losses;
}

}  // namespace tandem::testing
