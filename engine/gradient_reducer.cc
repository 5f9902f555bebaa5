#include "engine/gradient_reducer.h"

#include <ATen/ATen.h>
#include <torch/csrc/autograd/engine.h>

#include <algorithm>
#include <exception>
#include <set>

#include "absl/strings/str_cat.h"
#include "common/logging.h"

namespace tandem::engine {
namespace {

constexpr char kComponent[] = "engine";
// DeepSpeed's overlap_comm double buffering: reduction buffers stay bounded by twice the bucket
// size, not the model size.
constexpr size_t kMaxBucketsInFlight = 2;

}  // namespace

void WarnOnce(const std::string& message) {
  if (message.empty()) return;
  static std::mutex mu;
  static std::set<std::string> seen;
  std::lock_guard<std::mutex> lock(mu);
  if (seen.insert(message).second) TANDEM_LOG(kWarning, kComponent) << message;
}

GradientReducer::GradientReducer(Options options)
    : options_(std::move(options)), self_(std::make_shared<GradientReducer*>(this)) {
  const Layout& layout = *options_.layout;
  const size_t units = layout.units().size();
  pending_.assign(units, 0);
  launched_.assign(units, false);
  buckets_.assign(units, at::Tensor());
  delivered_.assign(layout.params().size(), false);
  for (size_t u = 0; u < units; ++u)
    pending_[u] = layout.units()[u].end_param - layout.units()[u].first_param;
  next_launch_ = static_cast<int>(units) - 1;
}

GradientReducer::~GradientReducer() { *self_ = nullptr; }

bool GradientReducer::DefersReduction() const {
  return options_.stage <= 1 && options_.accumulation_steps > 1 && !options_.at_boundary();
}

bool GradientReducer::ReducesInPlace() const {
  return options_.stage <= 1 && options_.comm_dtype == options_.grad_dtype &&
         !reduced_this_micro_step_;
}

void GradientReducer::EnterBackward() {
  std::lock_guard<std::mutex> lock(mu_);
  BeginBackwardLocked();
}

void GradientReducer::AddFromHook(int index, at::Tensor& grad) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!grad.defined()) return;
  BeginBackwardLocked();
  AddLocked(index, grad);
  grad.reset();
  LaunchReadyLocked();
}

void GradientReducer::Add(const std::vector<std::pair<int, at::Tensor>>& grads) {
  std::lock_guard<std::mutex> lock(mu_);
  BeginBackwardLocked();
  for (const auto& [index, grad] : grads) AddLocked(index, grad);
  LaunchReadyLocked();
}

void GradientReducer::BeginBackwardLocked() {
  if (in_backward_) return;
  in_backward_ = true;
  // Runs once when the current graph task (the whole backward call) finishes.
  std::shared_ptr<GradientReducer*> self = self_;
  torch::autograd::Engine::get_default_engine().queue_callback([self] {
    if (GradientReducer* reducer = *self) reducer->OnBackwardEnd();
  });
}

void GradientReducer::AddLocked(int index, const at::Tensor& grad) {
  const Layout& layout = *options_.layout;
  const int u = layout.slots()[index].unit;
  if (launched_[u]) {
    RecordErrorLocked(absl::InternalError(
        absl::StrCat("parameter ", layout.params()[index].name,
                     " received a gradient after its bucket was reduced in the same backward")));
    return;
  }
  at::Tensor target;
  if (DefersReduction() || ReducesInPlace()) {
    target = options_.unit_gradients(u);
  } else {
    if (!buckets_[u].defined()) {
      buckets_[u] =
          at::zeros({layout.units()[u].padded},
                    at::TensorOptions().device(options_.device).dtype(options_.comm_dtype));
      NoteBucketBytesLocked();
    }
    target = buckets_[u];
  }
  target.narrow(0, layout.slots()[index].offset, layout.params()[index].numel)
      .add_(grad.detach().reshape(-1), options_.gradient_scale);
  if (!delivered_[index]) {
    delivered_[index] = true;
    --pending_[u];
  }
}

void GradientReducer::LaunchReadyLocked() {
  if (!options_.overlap_comm || DefersReduction()) return;
  while (next_launch_ >= 0 && pending_[next_launch_] == 0) LaunchUnitLocked(next_launch_--);
  // Opportunistically fold what already arrived, to free buckets early.
  absl::Status status = FoldLocked(/*keep_at_most=*/0, /*block=*/false);
  if (!status.ok()) RecordErrorLocked(status);
}

void GradientReducer::LaunchUnitLocked(int unit) {
  // At most kMaxBucketsInFlight: beyond that, wait for the oldest.
  absl::Status status = FoldLocked(kMaxBucketsInFlight - 1, /*block=*/true);
  if (!status.ok()) RecordErrorLocked(status);
  const Unit& u = options_.layout->units()[unit];
  InFlight flight;
  flight.unit = unit;
  launched_[unit] = true;
  if (ReducesInPlace()) {
    // The window's micro-batches and this one are summed in the gradient buffer already.
    flight.in_place = true;
    flight.bucket = options_.unit_gradients(unit);
    flight.work = options_.communicator->AllReduceSum(flight.bucket);
    in_flight_.push_back(std::move(flight));
    return;
  }
  flight.bucket =
      buckets_[unit].defined()
          ? buckets_[unit]
          : at::zeros({u.padded},
                      at::TensorOptions().device(options_.device).dtype(options_.comm_dtype));
  buckets_[unit] = at::Tensor();
  if (options_.stage <= 1 && options_.accumulation_steps > 1 && !reduced_this_micro_step_) {
    // The window's earlier micro-batches, summed locally: reduced now, with this one's.
    at::Tensor local = options_.unit_gradients(unit);
    flight.bucket.add_(local);
    local.zero_();
  }
  if (options_.stage <= 1) {
    flight.work = options_.communicator->AllReduceSum(flight.bucket);
  } else {
    flight.output = at::empty({u.shard}, flight.bucket.options());
    flight.work = options_.communicator->ReduceScatterSum(flight.bucket, flight.output);
  }
  in_flight_.push_back(std::move(flight));
  NoteBucketBytesLocked();
}

void GradientReducer::NoteBucketBytesLocked() {
  auto bytes = [](const at::Tensor& t) {
    return t.defined() ? static_cast<int64_t>(t.nbytes()) : 0;
  };
  int64_t live = 0;
  for (const at::Tensor& bucket : buckets_) live += bytes(bucket);
  for (const InFlight& flight : in_flight_) {
    if (!flight.in_place) live += bytes(flight.bucket) + bytes(flight.output);
  }
  peak_bucket_bytes_ = std::max(peak_bucket_bytes_, live);
}

absl::Status GradientReducer::FoldLocked(size_t keep_at_most, bool block) {
  while (in_flight_.size() > keep_at_most) {
    InFlight& flight = in_flight_.front();
    if (!block && !flight.work->IsCompleted()) break;
    absl::Status status = flight.work->Wait(options_.timeout);
    if (status.ok() && !flight.in_place) {
      options_.unit_gradients(flight.unit)
          .add_(options_.stage <= 1 ? flight.bucket : flight.output);
    }
    in_flight_.pop_front();
    if (!status.ok()) return status;
  }
  return absl::OkStatus();
}

void GradientReducer::OnBackwardEnd() {
  std::lock_guard<std::mutex> lock(mu_);
  FinishLocked();
}

void GradientReducer::FinishLocked() {
  try {
    // Every unit, in the same order on every rank, whether or not this rank's graph reached it;
    // none inside an accumulation window at stages 0 and 1.
    while (!DefersReduction() && next_launch_ >= 0) LaunchUnitLocked(next_launch_--);
    absl::Status status = FoldLocked(/*keep_at_most=*/0, /*block=*/true);
    if (!status.ok()) RecordErrorLocked(status);
  } catch (const std::exception& e) {
    RecordErrorLocked(absl::InternalError(absl::StrCat("gradient reduction failed: ", e.what())));
  }
  in_flight_.clear();
  const Layout& layout = *options_.layout;
  for (size_t u = 0; u < pending_.size(); ++u) {
    pending_[u] = layout.units()[u].end_param - layout.units()[u].first_param;
    launched_[u] = false;
    buckets_[u] = at::Tensor();
  }
  std::fill(delivered_.begin(), delivered_.end(), false);
  next_launch_ = static_cast<int>(pending_.size()) - 1;
  in_backward_ = false;
  ++backwards_this_micro_step_;
  if (!DefersReduction()) reduced_this_micro_step_ = true;
}

GradientReducer::Settled GradientReducer::SettleMicroStep(int64_t micro_step, bool take_failure) {
  std::lock_guard<std::mutex> lock(mu_);
  if (in_backward_) {
    // Step() runs on the training thread after backward returned, so a backward still "running"
    // is one that threw before its end (its final callback never ran). Its remaining reductions
    // run now, so the group's collectives stay matched, and its partial gradients are dropped;
    // the boundary then skips the update on every rank (NOTE [Failed backward]).
    FinishLocked();
    options_.zero_gradients();
    if (backward_failure_.empty()) {
      backward_failure_ = absl::StrCat("the backward of micro step ", micro_step,
                                       " did not finish (an exception inside it?)");
    }
  } else if (backwards_this_micro_step_ == 0 && !DefersReduction() &&
             !options_.layout->units().empty()) {
    // No gradient reached this engine in this micro-batch (its loss did not depend on the
    // engine's parameters): this rank contributes zeros to the reduction its peers are in.
    WarnOnce(absl::StrCat("engine: group ", options_.communicator->group_name(), " rank ",
                          options_.communicator->rank(),
                          ": no gradient reached the engine in micro step ", micro_step,
                          "; this rank contributes zeros to the group's reduction"));
    FinishLocked();
  }
  backwards_this_micro_step_ = 0;
  reduced_this_micro_step_ = false;
  Settled settled;
  settled.error = error_;
  // An error returns before the boundary takes the failure: it stays for the next Step().
  settled.failure = take_failure && error_.ok() ? std::exchange(backward_failure_, std::string())
                                                : backward_failure_;
  return settled;
}

void GradientReducer::NoteBackwardFailure(const std::string& failure) {
  std::lock_guard<std::mutex> lock(mu_);
  if (backward_failure_.empty()) backward_failure_ = failure;
}

void GradientReducer::RecordError(absl::Status status) {
  std::lock_guard<std::mutex> lock(mu_);
  RecordErrorLocked(std::move(status));
}

void GradientReducer::RecordErrorLocked(absl::Status status) {
  if (!error_.ok()) return;  // the first error is the cause; later ones follow from it
  TANDEM_LOG(kError, kComponent) << "group " << options_.communicator->group_name() << " rank "
                                 << options_.communicator->rank() << ": " << status.message();
  error_ = std::move(status);
}

absl::Status GradientReducer::error() const {
  std::lock_guard<std::mutex> lock(mu_);
  return error_;
}

bool GradientReducer::in_backward() const {
  std::lock_guard<std::mutex> lock(mu_);
  return in_backward_;
}

int64_t GradientReducer::peak_bucket_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return peak_bucket_bytes_;
}

}  // namespace tandem::engine
