// The engine's gradient flow between Step() calls (NOTE [Gradient flow] in engine.h, NOTE
// [Buckets]): each trainable parameter's gradient lands in its unit's bucket, or straight in the
// gradient buffer; a unit whose parameters have all arrived is reduced (all-reduce at stages 0-1,
// reduce-scatter at 2-3) while autograd keeps running, at most kMaxBucketsInFlight at a time, and
// folded into the gradient buffer; when the backward call ends every unit not yet launched is
// launched in a fixed order, so that every rank issues the same collectives. Step() then settles
// the micro-batch (NOTE [Failed backward] in engine_step.cc).
//
// The Engine owns one and forwards its hooks here; the reducer owns the backward state and the
// lock that guards it. Internal to engine/.
//
// Thread-safety: every method may be called from the training thread or an autograd thread.
#pragma once

#include <ATen/core/Tensor.h>

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "engine/communicator.h"
#include "engine/layout.h"

namespace tandem::engine {

// Logs `message` as a warning the first time this process sees it (several engines of a process,
// the colocated trainer's two say, share one).
void WarnOnce(const std::string& message);

class GradientReducer {
 public:
  struct Options {
    const Layout* layout = nullptr;  // outlives the reducer
    Communicator* communicator = nullptr;
    int stage = 0;             // ZeRO stage
    bool overlap_comm = true;  // launch units during backward, not only at its end
    int64_t accumulation_steps = 1;
    std::chrono::milliseconds timeout{0};  // of each collective
    at::Device device{at::kCPU};
    at::ScalarType comm_dtype = at::kFloat;
    at::ScalarType grad_dtype = at::kFloat;
    float gradient_scale = 1.0f;  // applied to every gradient as it arrives
    // The gradient buffer's part for a unit: full coordinates at stages 0-1, this rank's shard at
    // 2-3; the whole buffer zeroed.
    std::function<at::Tensor(int unit)> unit_gradients;
    std::function<void()> zero_gradients;
    // Whether the current micro-step ends the accumulation window.
    std::function<bool()> at_boundary;
  };

  explicit GradientReducer(Options options);
  ~GradientReducer();  // a queued end-of-backward callback then does nothing
  GradientReducer(const GradientReducer&) = delete;
  GradientReducer& operator=(const GradientReducer&) = delete;

  // A backward is under way (a hook fired, or a block's recomputation entered it).
  void EnterBackward();
  // Parameter `index`'s gradient, from its accumulator hook: taken from `grad` (then reset); an
  // undefined one is ignored.
  void AddFromHook(int index, at::Tensor& grad);
  // Several parameters' gradients at once (a block's recomputed backward).
  void Add(const std::vector<std::pair<int, at::Tensor>>& grads);

  // Step()'s first act: finishes a backward that threw, or reduces zeros for a micro-batch whose
  // backward never reached the engine, and returns the first recorded error and the failure of this
  // optimizer step's backward (taken, and so cleared, when `take_failure`). `micro_step` (1-based)
  // names the micro-batch in messages.
  struct Settled {
    absl::Status error;
    std::string failure;
  };
  Settled SettleMicroStep(int64_t micro_step, bool take_failure);

  // A backward call that threw: remembered, unless one already was, until the optimizer step.
  void NoteBackwardFailure(const std::string& failure);
  // The first error of a hook or a collective since the engine was created (OK if none); a later
  // one follows from it and is dropped.
  void RecordError(absl::Status status);
  absl::Status error() const;
  bool in_backward() const;
  // MemoryReport::bucket_bytes.
  int64_t peak_bucket_bytes() const;

 private:
  struct InFlight {
    int unit = 0;
    std::shared_ptr<Work> work;
    at::Tensor bucket;      // all-reduced in place (stages 0-1) or reduce-scattered from (2-3)
    at::Tensor output;      // reduce-scatter result (stages 2-3)
    bool in_place = false;  // bucket is the unit's slice of the gradient buffer: nothing to fold
  };

  // Stages 0 and 1 inside an accumulation window (DDP's no_sync): this micro-batch's gradients are
  // summed into the local gradient buffer and reduced once, with the boundary's.
  bool DefersReduction() const;
  // Stages 0 and 1 whose reduction dtype is the gradient's: gradients are summed straight into the
  // gradient buffer and each unit is all-reduced there in place, with no bucket (NOTE [Buckets]).
  // Only the micro-batch's first reduction: a second backward call in the same micro-batch must
  // reduce its own gradients alone, not the buffer that already holds the group's sum.
  bool ReducesInPlace() const;
  // The rest hold mu_.
  void BeginBackwardLocked();
  void AddLocked(int index, const at::Tensor& grad);
  void LaunchReadyLocked();
  void LaunchUnitLocked(int unit);
  void NoteBucketBytesLocked();  // updates peak_bucket_bytes_ after a bucket was allocated
  // Adds reduced buckets, oldest first, into the gradient buffer until at most `keep_at_most`
  // remain in flight; waits for them if `block`, else stops at the first one not yet complete.
  absl::Status FoldLocked(size_t keep_at_most, bool block);
  // Launches every unit not yet launched, folds the reductions and ends the backward.
  void FinishLocked();
  void RecordErrorLocked(absl::Status status);
  void OnBackwardEnd();

  const Options options_;
  std::shared_ptr<GradientReducer*> self_;  // the end-of-backward callbacks hold it

  mutable std::mutex mu_;
  bool in_backward_ = false;
  std::vector<int> pending_;         // per unit: parameters not yet delivered in this backward
  std::vector<bool> delivered_;      // per parameter, this backward
  std::vector<bool> launched_;       // per unit, this backward
  std::vector<at::Tensor> buckets_;  // per unit, while filling
  int next_launch_ = -1;             // units launch from the last to the first
  std::deque<InFlight> in_flight_;
  absl::Status error_;
  int64_t peak_bucket_bytes_ = 0;
  int backwards_this_micro_step_ = 0;     // backward calls that reached the engine since Step()
  bool reduced_this_micro_step_ = false;  // a reduction of this micro-batch's gradients is done
  std::string backward_failure_;          // this optimizer step's failed backward, if any
};

}  // namespace tandem::engine
