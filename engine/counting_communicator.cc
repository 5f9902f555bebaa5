#include "engine/counting_communicator.h"

#include <algorithm>
#include <utility>

namespace tandem::engine {
namespace {

int64_t Bytes(const at::Tensor& t) { return static_cast<int64_t>(t.numel() * t.element_size()); }

// Takes its elements off the in-flight count once, at the first Wait.
class CountedWork final : public Work {
 public:
  CountedWork(std::shared_ptr<Work> inner, int64_t elements, std::shared_ptr<int64_t> in_flight)
      : inner_(std::move(inner)), elements_(elements), in_flight_(std::move(in_flight)) {}
  bool IsCompleted() override { return inner_->IsCompleted(); }
  absl::Status Wait(std::chrono::milliseconds timeout) override {
    absl::Status status = inner_->Wait(timeout);
    if (!waited_) *in_flight_ -= elements_;
    waited_ = true;
    return status;
  }

 private:
  std::shared_ptr<Work> inner_;
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
  return inner_->AllReduceSum(std::move(tensor));
}

std::shared_ptr<Work> CountingCommunicator::ReduceScatterSum(at::Tensor input, at::Tensor output) {
  ++counts_.operations;
  counts_.reduce_scatter_bytes += Bytes(input);
  return inner_->ReduceScatterSum(std::move(input), std::move(output));
}

std::shared_ptr<Work> CountingCommunicator::AllGather(at::Tensor input, at::Tensor output) {
  ++counts_.operations;
  counts_.all_gather_bytes += Bytes(output);
  const int64_t elements = output.numel();
  *in_flight_ += elements;
  max_in_flight_ = std::max(max_in_flight_, *in_flight_);
  return std::make_shared<CountedWork>(inner_->AllGather(std::move(input), std::move(output)),
                                       elements, in_flight_);
}

std::shared_ptr<Work> CountingCommunicator::AllToAll(at::Tensor input, at::Tensor output) {
  ++counts_.operations;
  counts_.all_to_all_bytes += Bytes(input);
  return inner_->AllToAll(std::move(input), std::move(output));
}

std::shared_ptr<Work> CountingCommunicator::Broadcast(at::Tensor tensor, int root) {
  ++counts_.operations;
  counts_.broadcast_bytes += Bytes(tensor);
  return inner_->Broadcast(std::move(tensor), root);
}

std::shared_ptr<Work> CountingCommunicator::Barrier() {
  ++counts_.operations;
  return inner_->Barrier();
}

}  // namespace tandem::engine
