// World size 1 (communicator.h): every operation completes before it returns. Reductions leave the
// data as it is; reduce-scatter, all-gather and all-to-all copy input to output (nothing when they
// alias).
#include <atomic>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "engine/communicator.h"
#include "engine/communicator_checks.h"

namespace tandem::engine {
namespace {

absl::Status CheckSameShape(const at::Tensor& input, const at::Tensor& output) {
  if (absl::Status s = CheckTensor(input, "input"); !s.ok()) return s;
  if (absl::Status s = CheckTensor(output, "output"); !s.ok()) return s;
  if (input.scalar_type() != output.scalar_type() || input.numel() != output.numel()) {
    return absl::InvalidArgumentError(
        absl::StrCat("input (", input.numel(), " ", c10::toString(input.scalar_type()),
                     ") and output (", output.numel(), " ", c10::toString(output.scalar_type()),
                     ") differ; a group of one rank needs them equal"));
  }
  return absl::OkStatus();
}

class SingleRankCommunicator final : public Communicator {
 public:
  explicit SingleRankCommunicator(std::string group_name) : group_name_(std::move(group_name)) {}

  int rank() const override { return 0; }
  int world_size() const override { return 1; }
  const std::string& group_name() const override { return group_name_; }
  int64_t last_sequence() const override { return sequence_.load(); }

  std::shared_ptr<Work> AllReduceSum(at::Tensor tensor) override {
    return Done("all_reduce", CheckTensor(tensor, "tensor"));
  }

  std::shared_ptr<Work> ReduceScatterSum(at::Tensor input, at::Tensor output) override {
    return Copy("reduce_scatter", input, output);
  }

  std::shared_ptr<Work> AllGather(at::Tensor input, at::Tensor output) override {
    return Copy("all_gather", input, output);
  }

  std::shared_ptr<Work> AllToAll(at::Tensor input, at::Tensor output) override {
    return Copy("all_to_all", input, output);
  }

  std::shared_ptr<Work> Broadcast(at::Tensor tensor, int root) override {
    absl::Status status = CheckTensor(tensor, "tensor");
    if (status.ok() && root != 0) {
      status = absl::InvalidArgumentError(absl::StrCat("root ", root, " in a group of one rank"));
    }
    return Done("broadcast", status);
  }

  std::shared_ptr<Work> Barrier() override { return Done("barrier", absl::OkStatus()); }

 private:
  std::shared_ptr<Work> Copy(const char* operation, const at::Tensor& input,
                             const at::Tensor& output) {
    absl::Status status = CheckSameShape(input, output);
    if (status.ok() && input.data_ptr() != output.data_ptr()) {
      try {
        output.view({-1}).copy_(input.view({-1}));
      } catch (const std::exception& e) {
        status = absl::InternalError(e.what());
      }
    }
    return Done(operation, status);
  }

  // Takes the operation's sequence number and completes it with `status`.
  std::shared_ptr<Work> Done(const char* operation, const absl::Status& status) {
    const int64_t sequence = ++sequence_;
    if (status.ok()) return std::make_shared<ReadyWork>(status);
    return std::make_shared<ReadyWork>(absl::Status(
        status.code(), absl::StrCat("group '", group_name_, "' rank 0: ", operation, " (sequence ",
                                    sequence, "): ", status.message())));
  }

  const std::string group_name_;
  std::atomic<int64_t> sequence_{0};
};

}  // namespace

std::shared_ptr<Communicator> CreateSingleRankCommunicator(std::string group_name) {
  return std::make_shared<SingleRankCommunicator>(std::move(group_name));
}

}  // namespace tandem::engine
