#include "engine/counting_communicator.h"

#include <algorithm>
#include <chrono>
#include <utility>

namespace tandem::engine {
namespace {

int64_t Bytes(const at::Tensor& t) { return static_cast<int64_t>(t.numel() * t.element_size()); }

// Adds the time each Wait blocks to `wait_ns`; an all-gather's also takes its elements off the
// in-flight count once, at the first Wait.
class CountedWork final : public Work {
 public:
  CountedWork(std::shared_ptr<Work> inner, std::shared_ptr<std::atomic<int64_t>> wait_ns,
              int64_t elements = 0, std::shared_ptr<int64_t> in_flight = nullptr)
      : inner_(std::move(inner)),
        wait_ns_(std::move(wait_ns)),
        elements_(elements),
        in_flight_(std::move(in_flight)) {}
  bool IsCompleted() override { return inner_->IsCompleted(); }
  absl::Status Wait(std::chrono::milliseconds timeout) override {
    const auto start = std::chrono::steady_clock::now();
    absl::Status status = inner_->Wait(timeout);
    *wait_ns_ += std::chrono::duration_cast<std::chrono::nanoseconds>(
                     std::chrono::steady_clock::now() - start)
                     .count();
    if (in_flight_ && !waited_) *in_flight_ -= elements_;
    waited_ = true;
    return status;
  }

 private:
  std::shared_ptr<Work> inner_;
  std::shared_ptr<std::atomic<int64_t>> wait_ns_;
  int64_t elements_;
  std::shared_ptr<int64_t> in_flight_;
  bool waited_ = false;
};

}  // namespace

CountingCommunicator::CountingCommunicator(std::shared_ptr<Communicator> inner)
    : inner_(std::move(inner)) {}

std::shared_ptr<Work> CountingCommunicator::AllReduceSum(at::Tensor tensor) {
  ++counts_.operations;
  counts_.all_reduce_bytes += Bytes(tensor);
  return std::make_shared<CountedWork>(inner_->AllReduceSum(std::move(tensor)), wait_ns_);
}

std::shared_ptr<Work> CountingCommunicator::ReduceScatterSum(at::Tensor input, at::Tensor output) {
  ++counts_.operations;
  counts_.reduce_scatter_bytes += Bytes(input);
  return std::make_shared<CountedWork>(
      inner_->ReduceScatterSum(std::move(input), std::move(output)), wait_ns_);
}

std::shared_ptr<Work> CountingCommunicator::AllGather(at::Tensor input, at::Tensor output) {
  ++counts_.operations;
  counts_.all_gather_bytes += Bytes(output);
  const int64_t elements = output.numel();
  *in_flight_ += elements;
  max_in_flight_ = std::max(max_in_flight_, *in_flight_);
  return std::make_shared<CountedWork>(inner_->AllGather(std::move(input), std::move(output)),
                                       wait_ns_, elements, in_flight_);
}

std::shared_ptr<Work> CountingCommunicator::AllToAll(at::Tensor input, at::Tensor output) {
  ++counts_.operations;
  counts_.all_to_all_bytes += Bytes(input);
  return std::make_shared<CountedWork>(inner_->AllToAll(std::move(input), std::move(output)),
                                       wait_ns_);
}

std::shared_ptr<Work> CountingCommunicator::Broadcast(at::Tensor tensor, int root) {
  ++counts_.operations;
  counts_.broadcast_bytes += Bytes(tensor);
  return std::make_shared<CountedWork>(inner_->Broadcast(std::move(tensor), root), wait_ns_);
}

std::shared_ptr<Work> CountingCommunicator::Barrier() {
  ++counts_.operations;
  return std::make_shared<CountedWork>(inner_->Barrier(), wait_ns_);
}

}  // namespace tandem::engine
