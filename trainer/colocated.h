// `tandem run JOB --colocated`: both models of a job in this process, each under its own engine (a
// group of one rank), trained with exactly the step of DESIGN §2:
//
//   for each micro-batch k of the step:
//     E    = vision(images_k)                      under the vision engine's autocast
//     leaf = E.detach().requires_grad_()           what the LLM group would receive over the wire
//     loss = sum of text-token cross-entropy(llm(leaf, tokens_k)) / tokens in the whole global batch
//     loss.backward();  E.backward(leaf.grad())    the non-scalar backward of the vision side
//     llm_engine.Step();  vision_engine.Step()     update at the accumulation boundary
//
// so its per-step losses are the reference a disaggregated run must reproduce. The engines reduce with
// `tandem.gradient_reduction: sum`, since the loss is already normalised over the global batch.
//
// The run directory receives job.json (the resolved spec), tokenizer.json, metrics.jsonl, loss.svg,
// checkpoints/step-NNNNNN/{vision,llm}/, the final weights as vision.safetensors and llm.safetensors,
// and summary.json. This header is torch-free (the CLI includes it).
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>

#include "absl/status/statusor.h"
#include "jobspec/job_config.h"
#include "rundir/summary.h"

namespace tandem::trainer {

struct RunOptions {
  std::string run_dir;             // created; an existing non-empty directory is an error
  int threads = 0;                 // intra-op threads; 0 leaves LibTorch's setting
  std::FILE* progress = stderr;    // the live progress line; nullptr for none
  bool interactive = false;        // redraw the progress line in place (a terminal)
};

absl::StatusOr<rundir::RunSummary> RunColocated(const jobspec::JobConfig& job, const RunOptions& options);


}  // namespace tandem::trainer
