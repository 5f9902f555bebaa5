// FakeGroup (fake_communicator.h): operations meet by sequence number in a Meeting, each with its
// own mutex and condition variable. The rank that arrives last checks that all ranks issued the
// same operation on matching tensors, computes every rank's result (sums in fp32, rank order) and
// wakes the waiters. Lock order: a Meeting's mutex before the State's, never the reverse.
#include "engine/fake_communicator.h"

#include <ATen/ATen.h>

#include <atomic>
#include <condition_variable>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "engine/communicator_checks.h"

namespace tandem::engine {
namespace {

// One rank's part in an operation.
struct Contribution {
  std::string operation;
  at::Tensor input;   // the in-place tensor for all_reduce and broadcast
  at::Tensor output;  // reduce_scatter, all_gather and all_to_all
  int root = 0;
};

struct Meeting {
  explicit Meeting(int world_size) : contributions(world_size), arrived(world_size, false) {}

  std::mutex mu;
  std::condition_variable cv;
  std::vector<Contribution> contributions;  // by rank
  std::vector<bool> arrived;                // by rank
  int arrivals = 0;
  bool done = false;
  absl::Status status;  // the outcome shared by all ranks, once done
};

at::Tensor Flat(const at::Tensor& t) { return t.view({-1}); }

// Every rank issued the same operation on tensors of the same dtype and size (and the same root).
absl::Status CheckAgreement(const std::vector<Contribution>& c) {
  for (size_t r = 1; r < c.size(); ++r) {
    if (c[r].operation != c[0].operation) {
      return absl::InvalidArgumentError(absl::StrCat("rank ", r, " issued ", c[r].operation,
                                                     " where rank 0 issued ", c[0].operation));
    }
    if (c[r].root != c[0].root) {
      return absl::InvalidArgumentError(
          absl::StrCat("rank ", r, " named root ", c[r].root, ", rank 0 root ", c[0].root));
    }
    if (c[r].input.defined() && (c[r].input.scalar_type() != c[0].input.scalar_type() ||
                                 c[r].input.numel() != c[0].input.numel())) {
      return absl::InvalidArgumentError(
          absl::StrCat("rank ", r, "'s tensor differs in dtype or size from rank 0's"));
    }
  }
  return absl::OkStatus();
}

at::Tensor SumInputs(const std::vector<Contribution>& c) {
  at::Tensor sum = at::zeros({c[0].input.numel()}, c[0].input.options().dtype(at::kFloat));
  for (const auto& contribution : c) sum.add_(Flat(contribution.input).to(at::kFloat));
  return sum;
}

// Writes every rank's result. Runs with the meeting's mutex held, by the last rank to arrive.
void Compute(std::vector<Contribution>& c) {
  const std::string& operation = c[0].operation;
  const int world_size = static_cast<int>(c.size());
  if (operation == "all_reduce") {
    at::Tensor sum = SumInputs(c);
    for (auto& contribution : c) Flat(contribution.input).copy_(sum);
  } else if (operation == "reduce_scatter") {
    at::Tensor sum = SumInputs(c);
    const int64_t n = sum.numel() / world_size;
    for (int r = 0; r < world_size; ++r) Flat(c[r].output).copy_(sum.narrow(0, r * n, n));
  } else if (operation == "all_gather") {
    std::vector<at::Tensor> inputs;
    for (const auto& contribution : c) inputs.push_back(Flat(contribution.input));
    at::Tensor gathered = at::cat(inputs);  // a copy: an input may alias its rank's output
    for (auto& contribution : c) Flat(contribution.output).copy_(gathered);
  } else if (operation == "all_to_all") {
    const int64_t n = c[0].input.numel() / world_size;
    std::vector<at::Tensor> inputs;  // copies, so that the results never read a written output
    for (const auto& contribution : c) inputs.push_back(Flat(contribution.input).clone());
    for (int r = 0; r < world_size; ++r) {
      for (int s = 0; s < world_size; ++s) {
        Flat(c[r].output).narrow(0, s * n, n).copy_(inputs[s].narrow(0, r * n, n));
      }
    }
  } else if (operation == "broadcast") {
    at::Tensor value = Flat(c[c[0].root].input).clone();
    for (auto& contribution : c) Flat(contribution.input).copy_(value);
  }
}

}  // namespace

struct FakeGroup::State {
  State(int world_size, std::string group_name)
      : world_size(world_size), group_name(std::move(group_name)) {}

  const int world_size;
  const std::string group_name;
  std::mutex mu;
  std::map<int64_t, absl::Status> failures;              // guarded by mu
  std::set<int> stalled;                                 // guarded by mu
  std::map<int64_t, std::shared_ptr<Meeting>> meetings;  // guarded by mu; open ones only
};

namespace {

class FakeWork final : public Work {
 public:
  FakeWork(std::string what, std::shared_ptr<Meeting> meeting)
      : what_(std::move(what)), meeting_(std::move(meeting)) {}

  bool IsCompleted() override {
    std::lock_guard<std::mutex> lock(meeting_->mu);
    return status_.has_value() || meeting_->done;
  }

  absl::Status Wait(std::chrono::milliseconds timeout) override {
    std::unique_lock<std::mutex> lock(meeting_->mu);
    if (status_.has_value()) return *status_;
    if (meeting_->cv.wait_for(lock, timeout, [&] { return meeting_->done; })) {
      status_ = WithContext(what_, meeting_->status);
    } else {
      std::vector<int> missing;
      for (size_t r = 0; r < meeting_->arrived.size(); ++r) {
        if (!meeting_->arrived[r]) missing.push_back(static_cast<int>(r));
      }
      status_ = absl::DeadlineExceededError(
          absl::StrCat(what_, " did not complete within ", timeout.count(),
                       " ms; ranks that did not arrive: ", absl::StrJoin(missing, ", ")));
    }
    return *status_;
  }

 private:
  const std::string what_;
  const std::shared_ptr<Meeting> meeting_;
  std::optional<absl::Status> status_;  // guarded by meeting_->mu; set once
};

class FakeCommunicator final : public Communicator {
 public:
  FakeCommunicator(std::shared_ptr<FakeGroup::State> state, int rank)
      : state_(std::move(state)), rank_(rank) {}

  int rank() const override { return rank_; }
  int world_size() const override { return state_->world_size; }
  const std::string& group_name() const override { return state_->group_name; }
  int64_t last_sequence() const override { return sequence_.load(); }

  std::shared_ptr<Work> AllReduceSum(at::Tensor tensor) override {
    return Issue({"all_reduce", tensor, {}, 0}, CheckTensor(tensor, "tensor"));
  }

  std::shared_ptr<Work> ReduceScatterSum(at::Tensor input, at::Tensor output) override {
    return Issue({"reduce_scatter", input, output, 0}, CheckPair(input, output, "input", "output"));
  }

  std::shared_ptr<Work> AllGather(at::Tensor input, at::Tensor output) override {
    return Issue({"all_gather", input, output, 0}, CheckPair(output, input, "output", "input"));
  }

  std::shared_ptr<Work> AllToAll(at::Tensor input, at::Tensor output) override {
    absl::Status status = CheckTensor(input, "input");
    if (status.ok()) status = CheckTensor(output, "output");
    if (status.ok() && (input.scalar_type() != output.scalar_type() ||
                        input.numel() != output.numel() || input.numel() % world_size() != 0)) {
      status = absl::InvalidArgumentError(absl::StrCat(
          "input (", input.numel(), ") and output (", output.numel(),
          ") must have one dtype and the same multiple of world_size (", world_size(), ")"));
    }
    return Issue({"all_to_all", input, output, 0}, status);
  }

  std::shared_ptr<Work> Broadcast(at::Tensor tensor, int root) override {
    absl::Status status = CheckTensor(tensor, "tensor");
    if (status.ok() && (root < 0 || root >= world_size())) {
      status = absl::InvalidArgumentError(
          absl::StrCat("root ", root, " is not a rank of a group of ", world_size()));
    }
    return Issue({"broadcast", tensor, {}, root}, status);
  }

  std::shared_ptr<Work> Barrier() override { return Issue({"barrier", {}, {}, 0}, {}); }

 private:
  absl::Status CheckPair(const at::Tensor& large, const at::Tensor& small, const char* large_name,
                         const char* small_name) const {
    if (absl::Status s = CheckTensor(large, large_name); !s.ok()) return s;
    if (absl::Status s = CheckTensor(small, small_name); !s.ok()) return s;
    if (large.scalar_type() != small.scalar_type() ||
        large.numel() != world_size() * small.numel()) {
      return absl::InvalidArgumentError(absl::StrCat(
          large_name, " must have the dtype of ", small_name, " and world_size (", world_size(),
          ") times its ", small.numel(), " elements; it has ", large.numel()));
    }
    return absl::OkStatus();
  }

  std::shared_ptr<Work> Issue(Contribution contribution, const absl::Status& valid) {
    const int64_t sequence = ++sequence_;
    const std::string what = absl::StrCat("group '", state_->group_name, "' rank ", rank_, ": ",
                                          contribution.operation, " (sequence ", sequence, ")");
    if (!valid.ok()) return std::make_shared<ReadyWork>(WithContext(what, valid));

    std::shared_ptr<Meeting> meeting;
    bool stalled;
    {
      std::lock_guard<std::mutex> lock(state_->mu);
      auto failure = state_->failures.find(sequence);
      if (failure != state_->failures.end()) {
        return std::make_shared<ReadyWork>(WithContext(what, failure->second));
      }
      stalled = state_->stalled.count(rank_) > 0;
      auto& slot = state_->meetings[sequence];
      if (slot == nullptr) slot = std::make_shared<Meeting>(state_->world_size);
      meeting = slot;
    }
    if (!stalled) Arrive(*meeting, sequence, std::move(contribution));
    return std::make_shared<FakeWork>(what, meeting);
  }

  void Arrive(Meeting& meeting, int64_t sequence, Contribution contribution) {
    std::lock_guard<std::mutex> lock(meeting.mu);
    meeting.contributions[rank_] = std::move(contribution);
    meeting.arrived[rank_] = true;
    if (++meeting.arrivals < state_->world_size) return;

    absl::Status status = CheckAgreement(meeting.contributions);
    {
      std::lock_guard<std::mutex> state_lock(state_->mu);
      auto failure = state_->failures.find(sequence);
      if (status.ok() && failure != state_->failures.end()) status = failure->second;
      state_->meetings.erase(sequence);
    }
    if (status.ok()) {
      try {
        Compute(meeting.contributions);
      } catch (const std::exception& e) {
        status = absl::InternalError(e.what());
      }
    }
    meeting.contributions.clear();  // the caller's tensors are theirs again
    meeting.status = status;
    meeting.done = true;
    meeting.cv.notify_all();
  }

  const std::shared_ptr<FakeGroup::State> state_;
  const int rank_;
  std::atomic<int64_t> sequence_{0};
};

}  // namespace

FakeGroup::FakeGroup(int world_size, std::string group_name)
    : state_(std::make_shared<State>(world_size, std::move(group_name))) {
  for (int r = 0; r < world_size; ++r) {
    ranks_.push_back(std::make_shared<FakeCommunicator>(state_, r));
  }
}

FakeGroup::~FakeGroup() = default;

std::shared_ptr<Communicator> FakeGroup::rank(int r) { return ranks_.at(r); }

void FakeGroup::FailOperation(int64_t sequence, absl::Status status) {
  std::lock_guard<std::mutex> lock(state_->mu);
  state_->failures[sequence] = std::move(status);
}

void FakeGroup::StallRank(int rank) {
  std::lock_guard<std::mutex> lock(state_->mu);
  state_->stalled.insert(rank);
}

}  // namespace tandem::engine
