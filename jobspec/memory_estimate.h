// The least memory one actor of a job's group needs, worked out from the resolved spec before
// anything is built: the coordinator refuses at submit a job whose group cannot fit the memory its
// pool's actors state (`tandem actor --memory`, else their device's), and an actor refuses an
// assignment that cannot fit its own, so a spec asking for 10^12-parameter layers or 3e8 samples'
// order fails at once, naming the fields, instead of growing an actor until the kernel kills it.
//
// A lower bound, by design: it counts what the job must hold on one rank and leaves out what
// depends on the device and the allocator, so a job it refuses cannot run, and a job it admits may
// still run out (then the actor's own error names the group's fields).
//   model states  the engine's buffers exactly as engine::MemoryReport counts them, ZeRO
//                 padding aside: weights (param dtype), gradients (grad dtype), fp32 master
//                 weights when separate, two Adam moments (+ Kahan compensation), each split over
//                 the group's data-parallel ranks as the ZeRO stage says (NOTE [Units] in
//                 engine/layout.h), and frozen weights; a tensor-parallel rank counts its shards
//   activations   what backward keeps of one micro-batch: per position and layer, the inputs of
//                 the norms, projections and MLP (vision 8h + 2m, LLM 4h + (4h + 2kv + 4m) / T
//                 elements in the compute dtype), and the LLM's fp32 logits of the text
//                 positions and their gradient; not attention scores (a fused kernel keeps none)
//   data          the sampler's epoch order (8 bytes a training sample, where the spec says how
//                 many) and one micro-batch of fp32 images
// Not counted: CUDA's context and workspaces, allocator caches, reduction buckets, the stage-3
// blocks gathered in flight, LibTorch's own code and threads.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/role.h"
#include "jobspec/job_config.h"

namespace tandem::jobspec {

struct MemoryEstimate {
  Role role = Role::kVision;
  int64_t parameters = 0;       // the group's whole model, frozen ones included
  int64_t rank_parameters = 0;  // on the rank holding most: a tensor-parallel rank's shards
  double state_bytes_per_parameter = 0;  // model-state bytes per trainable parameter on one rank
  int zero_stage = 0;                    // the group's engine's
  int64_t model_state_bytes = 0;  // weights, gradients, master weights, moments, frozen weights
  int64_t activation_bytes = 0;   // one micro-batch's, on one rank
  int64_t samples_per_rank = 0;   // of a micro-batch (images, in the vision group: at most
                                  // data.max_images_per_sample a sample)
  int64_t positions = 0;          // of a sample in the group's model
  int64_t data_bytes = 0;
  int64_t total() const { return model_state_bytes + activation_bytes + data_bytes; }
};

// The estimate of one actor of `group`. REQUIRES: ValidateJobConfig(job) is OK, and, for a group
// with `pretrained`, its model sizes resolved (hf::ResolvePretrainedModels); a group's vocab_size
// of 0 (the word tokenizer's, known when the job starts) counts no vocabulary. InvalidArgument
// only for an engine block that does not parse.
absl::StatusOr<MemoryEstimate> EstimateGroupMemory(const JobConfig& job, Role role);

// "1.5 GiB", "300.0 MiB", "12 KiB".
std::string FormatBytes(int64_t bytes);

// The estimate with the fields each part comes from:
//   "an estimated 31.2 GiB on each actor: model states 28.0 GiB (llm.model: 3.50B parameters;
//    llm.engine: 8.0 bytes each at ZeRO stage 0 over 1 data-parallel rank),
//    activations 3.0 GiB (schedule.global_batch / schedule.micro_batches: 8 samples of 640
//    positions a rank), data 0.2 GiB (data.shapes.train_samples: the order of 300000000 samples)"
std::string DescribeEstimate(const MemoryEstimate& estimate, const JobConfig& job);

// OK when the estimate fits `available` bytes; else ResourceExhausted
// "<group>: needs <DescribeEstimate>, more than the <available> of <where>".
absl::Status CheckEstimateFits(const MemoryEstimate& estimate, const JobConfig& job,
                               int64_t available, const std::string& where);

}  // namespace tandem::jobspec
