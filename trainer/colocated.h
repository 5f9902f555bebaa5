// `tandem run JOB --colocated`: both stages of the step (step/stage.h) in this process, each a
// group of one rank with its own engine, exchanging embeddings and their gradients over an
// in-process transport (transport/in_process.h) instead of the network: the same code as a
// disaggregated run, so its per-step losses are the reference that run must reproduce
// (docs/design.md §2):
//
//   for each micro-batch k of the step:
//     E    = vision(images_k)                      under the vision engine's autocast
//     leaf = E.detach().requires_grad_()           what the LLM group receives
//     loss = sum of text-token cross-entropy(llm(leaf, tokens_k))
//            / tokens in the whole global batch
//     loss.backward();  E.backward(leaf.grad())    the non-scalar backward of the vision side
//     llm_engine.Step();  vision_engine.Step()     update at the accumulation boundary
//
// The two stages are fibers of the caller's thread (trainer/fiber.h), each computing until it waits
// on a transfer and then giving the thread to the other: every command (step, evaluation) runs on
// both at once, as the coordinator sends it to both groups, and their LibTorch work shares one
// OpenMP team as a single training loop's would.
//
// The run directory receives job.json (ResolvedJobSpec::json), tokenizer.json, metrics.jsonl,
// loss.svg, checkpoints/step-NNNNNN/{vision,llm}/, the final weights as vision.safetensors and
// llm.safetensors, summary.json, and with RunOptions::profile_first trace.json. This header is
// torch-free (the CLI includes it).
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>

#include "absl/status/statusor.h"
#include "jobspec/job_spec.h"
#include "rundir/summary.h"

namespace tandem::trainer {

struct RunOptions {
  std::string run_dir;           // created; an existing non-empty directory is an error
  int threads = 0;               // intra-op threads; 0 leaves LibTorch's setting
  std::FILE* progress = stderr;  // the live progress line; nullptr for none
  bool interactive = false;      // redraw the progress line in place (a terminal)
  std::string device = "cpu";    // both models' device: "cpu" or "cuda:N" (platform/device.h)
  // Steps [profile_first, profile_last] are traced into <run_dir>/trace.json (platform/trace.h);
  // 0: none. REQUIRES: 1 <= profile_first <= profile_last, or both 0.
  int64_t profile_first = 0;
  int64_t profile_last = 0;
};

// `job` as jobspec::ReadJobSpecFile (or ResolveJobSpecJson) made it: the config runs, the JSON
// becomes job.json.
absl::StatusOr<rundir::RunSummary> RunColocated(const jobspec::ResolvedJobSpec& job,
                                                const RunOptions& options);

}  // namespace tandem::trainer
