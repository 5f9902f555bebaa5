// What one rank's stage reports for a step and for an evaluation: plain C++, so the actor's gRPC
// side (actors/worker.h) and the coordinator's answers carry them without LibTorch.
#pragma once

#include <cstdint>

#include "rundir/run_loop.h"

namespace tandem::step {

struct StepResult {
  double loss = 0;       // LLM ranks: their share of the step loss; vision: 0
  double grad_norm = 0;  // the group's, before clipping
  double lr = 0;
  bool skipped = false;
  double compute_s = 0;
  double wait_s = 0;
  int64_t bytes_sent = 0;  // to the other group: embeddings (vision), gradients (LLM)
  // LLM ranks that report the loss (each replica's first): the positions of the rows they trained
  // on in this step, padding included, and how many of them were padding.
  int64_t positions = 0;
  int64_t padding = 0;
  // The work this rank's replica was planned (MicroBatchPlan::vision_images' tiles or llm_costs),
  // summed over the step's micro-batches.
  double planned = 0;
  // Samples of the step left out as unreadable (NOTE [Bad samples] in step/stage.h): the same on
  // every rank.
  int64_t skipped_samples = 0;
  // The bytes of snapshots this rank holds in memory (NOTE [Snapshots in memory]).
  int64_t snapshot_bytes = 0;
};

// Caption scores of the held-out samples a rank owns; the LLM ranks' counts add up to the group's.
using rundir::EvalCounts;

}  // namespace tandem::step
