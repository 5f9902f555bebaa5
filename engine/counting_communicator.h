// CountingCommunicator: a Communicator that forwards to another and counts what passes through it,
// for benchmarks (bytes a step moves), tests (how many all-gathers are in flight at once) and a
// stage's compute time (the time its callers spent blocked in Work::Wait, which a stage leaves out
// of the compute it reports: a rank that waits for its peers in a collective is not computing).
//
// Bytes are the tensor bytes each rank hands to a collective: the buffer of an all-reduce, the
// input of a reduce-scatter, the output of an all-gather, the tensor of a broadcast, the input of
// an all-to-all. What a backend moves on the wire differs by algorithm (a ring all-reduce sends
// about twice the buffer); these are the sizes DeepSpeed's and PyTorch's communication logs report.
//
// Thread-compatible, like the Communicator it wraps: one thread issues operations; the counters are
// read by that thread. The wait time is summed over every thread that waits (a CUDA backward waits
// for its reductions on an autograd thread while the issuing thread is blocked in backward).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include "engine/communicator.h"

namespace tandem::engine {

class CountingCommunicator final : public Communicator {
 public:
  explicit CountingCommunicator(std::shared_ptr<Communicator> inner);

  struct Counts {
    int64_t operations = 0;
    int64_t all_reduce_bytes = 0;
    int64_t reduce_scatter_bytes = 0;
    int64_t all_gather_bytes = 0;
    int64_t broadcast_bytes = 0;
    int64_t all_to_all_bytes = 0;
    int64_t bytes() const {
      return all_reduce_bytes + reduce_scatter_bytes + all_gather_bytes + broadcast_bytes +
             all_to_all_bytes;
    }
  };
  const Counts& counts() const { return counts_; }
  void ResetCounts() { counts_ = Counts{}; }
  // Output elements of all-gathers issued and not yet waited for; the most since the last reset.
  int64_t all_gather_elements_in_flight() const { return *in_flight_; }
  int64_t max_all_gather_elements_in_flight() const { return max_in_flight_; }
  void ResetMaxInFlight() { max_in_flight_ = *in_flight_; }
  // Seconds callers spent in Work::Wait of this communicator's operations since it was created.
  double wait_seconds() const { return wait_ns_->load() * 1e-9; }

  int rank() const override { return inner_->rank(); }
  int world_size() const override { return inner_->world_size(); }
  const std::string& group_name() const override { return inner_->group_name(); }
  int64_t last_sequence() const override { return inner_->last_sequence(); }
  std::shared_ptr<Work> AllReduceSum(at::Tensor tensor) override;
  std::shared_ptr<Work> ReduceScatterSum(at::Tensor input, at::Tensor output) override;
  std::shared_ptr<Work> AllGather(at::Tensor input, at::Tensor output) override;
  std::shared_ptr<Work> AllToAll(at::Tensor input, at::Tensor output) override;
  std::shared_ptr<Work> Broadcast(at::Tensor tensor, int root) override;
  std::shared_ptr<Work> Barrier() override;

 private:
  std::shared_ptr<Communicator> inner_;
  Counts counts_;
  std::shared_ptr<int64_t> in_flight_ = std::make_shared<int64_t>(0);
  int64_t max_in_flight_ = 0;
  std::shared_ptr<std::atomic<int64_t>> wait_ns_ = std::make_shared<std::atomic<int64_t>>(0);
};

}  // namespace tandem::engine
