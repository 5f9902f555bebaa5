// Gloo backend of communicator.h: c10d::ProcessGroupGloo on CPU tensors.
//
// NOTE [Gloo emulation]: Gloo in LibTorch 1.13 has no bf16, no reduce_scatter and no
// _allgather_base. Later versions add bf16 (2.2) and _allgather_base (2.3) (TANDEM_GLOO_HAS_* in
// compat.h). What each operation does:
// - bf16 all-reduce: every version reduces an fp32 copy and rounds once into the tensor when the
//   Work completes. Gloo 2.2+ could sum bf16 itself, but it rounds after each addition (at 3 ranks,
//   256 + 1 + 1 gives 256 instead of 258), so the CPU's sums would depend on the LibTorch version;
//   the fp32 sum is the exact one, and what the tests hold every version to.
// - reduce-scatter: every version all-reduces an fp32 (for bf16) copy of the whole input
//   (world_size times the traffic of a real reduce-scatter), then copies this rank's chunk into the
//   output. ProcessGroupGloo's own reduce-scatter (_reduce_scatter_base,
//   reduce_scatter_tensor_coalesced and the list reduce_scatter, checked on 2.11) does exactly this
//   too, but returns a Work whose isCompleted() never turns true and whose wait() ignores its
//   timeout and copies the chunk only then: the engine's non-blocking polling would never see it
//   finish.
// - all-gather: 2.3+ gathers with _allgather_base. 1.13 runs Gloo's list all-gather into a fresh
//   buffer, then one copy into the output. Both write the output only after the gather finished, so
//   the input may be this rank's chunk of the output.
// - bf16 all-gather, broadcast and all-to-all move bits only: natively from 2.2, as fp16 views
//   (same width) on 1.13. All-to-all is alltoall_base with equal splits on every version, writing
//   the caller's output directly.
// An emulation's copy into the caller's tensors runs exactly once, in whichever of IsCompleted() or
// Wait() first sees the operation finished, and never after Wait timed out. Operations that Gloo
// runs on the caller's tensors (all-reduce in place, broadcast, _allgather_base) can still write
// them if the peers arrive after that.
//
// Errors: c10d reports failures as exceptions; they are caught at this boundary and become a
// Status whose message names the group, the rank, the operation and its sequence number, followed
// by the exception's own message.
#ifndef USE_C10D_GLOO
#error "needs a LibTorch built with Gloo (its CMake target defines USE_C10D_GLOO)"
#endif

#include <atomic>
#include <chrono>
#include <exception>
#include <functional>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/communicator.h"
#include "engine/communicator_checks.h"
#include "engine/compat.h"

namespace tandem::engine {
namespace {

// c10d::Store over a KeyValueStore, for ProcessGroupGloo's rendezvous. Keys get the group's prefix
// so several groups can share one store. c10d expects failures as exceptions; the first failing
// Status is also kept so that CreateGlooCommunicator returns it with its own code.
class KeyValueStoreAdapter final : public c10d::Store {
 public:
  KeyValueStoreAdapter(std::shared_ptr<KeyValueStore> store, std::string prefix,
                       std::chrono::milliseconds timeout)
      : c10d::Store(timeout), store_(std::move(store)), prefix_(std::move(prefix)) {}

#if TANDEM_TORCH_AT_LEAST(2, 8)
  // Pure virtual from 2.8 on (pytorch#150966); the KeyValueStore is thread-safe, so share it.
  c10::intrusive_ptr<c10d::Store> clone() override {
    return c10::make_intrusive<KeyValueStoreAdapter>(store_, prefix_, timeout_);
  }
#endif

  void set(const std::string& key, const std::vector<uint8_t>& value) override {
    ThrowIfError(store_->Set(prefix_ + key, std::string(value.begin(), value.end())));
  }

  std::vector<uint8_t> get(const std::string& key) override {
    auto value = store_->Get(prefix_ + key, Finite(timeout_));
    ThrowIfError(value.status());
    return std::vector<uint8_t>(value->begin(), value->end());
  }

  int64_t add(const std::string& key, int64_t value) override {
    auto sum = store_->Add(prefix_ + key, value);
    ThrowIfError(sum.status());
    return *sum;
  }

  bool deleteKey(const std::string& key) override {
    absl::Status status = store_->Delete(prefix_ + key);
    if (absl::IsNotFound(status)) return false;
    ThrowIfError(status);
    return true;
  }

  bool check(const std::vector<std::string>& keys) override {
    for (const auto& key : keys) {
      auto present = store_->Check(prefix_ + key);
      ThrowIfError(present.status());
      if (!*present) return false;
    }
    return true;
  }

  // Pure virtual in c10d::Store, never called by ProcessGroupGloo; a KeyValueStore cannot count
  // keys.
  int64_t getNumKeys() override {
    throw std::logic_error("KeyValueStoreAdapter: getNumKeys is not supported");
  }

  void wait(const std::vector<std::string>& keys) override { wait(keys, timeout_); }

  void wait(const std::vector<std::string>& keys,
            const std::chrono::milliseconds& timeout) override {
    const auto deadline = std::chrono::steady_clock::now() + Finite(timeout);
    for (const auto& key : keys) {
      auto left =
          std::chrono::ceil<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
      ThrowIfError(
          store_->Get(prefix_ + key, std::max(left, std::chrono::milliseconds(0))).status());
    }
  }

  absl::Status first_error() const {
    std::lock_guard<std::mutex> lock(mu_);
    return first_error_;
  }

 private:
  // c10d's "no timeout" (zero) means wait without bound.
  static std::chrono::milliseconds Finite(std::chrono::milliseconds timeout) {
    return timeout == c10d::Store::kNoTimeout ? std::chrono::hours(24 * 365) : timeout;
  }

  void ThrowIfError(const absl::Status& status) {
    if (status.ok()) return;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (first_error_.ok()) first_error_ = status;
    }
    throw std::runtime_error(status.ToString());
  }

  const std::shared_ptr<KeyValueStore> store_;
  const std::string prefix_;
  mutable std::mutex mu_;
  absl::Status first_error_;
};

// c10::Error's what() carries a C++ backtrace; messages keep only the error itself.
std::string Message(const std::exception& e) {
  if (const auto* error = dynamic_cast<const c10::Error*>(&e)) {
    return error->what_without_backtrace();
  }
  return e.what();
}

std::string ExceptionMessage(const std::exception_ptr& error) {
  try {
    std::rethrow_exception(error);
  } catch (const std::exception& e) {
    return Message(e);
  } catch (...) {
    return "an exception not derived from std::exception";
  }
}

// Wraps a c10d::Work; `finish` copies results into the caller's tensors after success.
class GlooWork final : public Work {
 public:
  GlooWork(std::string what, c10::intrusive_ptr<c10d::Work> work, std::function<void()> finish)
      : what_(std::move(what)), work_(std::move(work)), finish_(std::move(finish)) {}

  bool IsCompleted() override {
    std::lock_guard<std::mutex> lock(mu_);
    if (status_.has_value()) return true;
    if (!work_->isCompleted()) return false;
    FinishLocked();
    return true;
  }

  absl::Status Wait(std::chrono::milliseconds timeout) override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (status_.has_value()) return *status_;
    }
    // c10d takes a zero timeout as "forever"; ours means "do not block".
    if (timeout > std::chrono::milliseconds(0)) {
      try {
        work_->wait(timeout);
      } catch (const std::exception&) {
        // Either a timeout or the operation's failure: both are read back from work_ below.
      }
    }
    std::lock_guard<std::mutex> lock(mu_);
    if (status_.has_value()) return *status_;
    if (work_->isCompleted()) {
      FinishLocked();
    } else {
      status_ = absl::DeadlineExceededError(
          absl::StrCat(what_, " did not complete within ", timeout.count(), " ms"));
      finish_ = nullptr;
    }
    return *status_;
  }

 private:
  void FinishLocked() {
    std::exception_ptr error = work_->exception();
    if (error != nullptr) {
      status_ = absl::InternalError(absl::StrCat(what_, " failed: ", ExceptionMessage(error)));
    } else {
      try {
        if (finish_) finish_();
        status_ = absl::OkStatus();
      } catch (const std::exception& e) {
        status_ = absl::InternalError(absl::StrCat(what_, ": copying the result: ", Message(e)));
      }
    }
    finish_ = nullptr;  // releases the temporaries
  }

  const std::string what_;
  const c10::intrusive_ptr<c10d::Work> work_;
  std::mutex mu_;
  std::function<void()> finish_;        // guarded by mu_
  std::optional<absl::Status> status_;  // guarded by mu_; set once
};

// The shared checks (communicator_checks.h), and Gloo's device: the CPU.
absl::Status CheckCpuTensor(const at::Tensor& t, const char* name) {
  if (t.defined() && !t.device().is_cpu()) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, " is on ", t.device().str(), "; the Gloo backend needs CPU tensors"));
  }
  return CheckTensor(t, name);
}

// Serialises the issuing of collectives across every Gloo group of the process. In LibTorch 2.x
// ProcessGroupGloo records each collective it enqueues in c10d's process-wide FlightRecorder, whose
// first record of a group inserts the group into a map outside the recorder's lock
// (FlightRecorderDetail.hpp, recordWithResetEnabled; checked on 2.11). Groups issuing from several
// threads at once (ranks as threads in the tests, or one process in several groups) corrupt that
// map: seen as a SIGSEGV in std::_Rb_tree_insert_and_rebalance. Issuing only enqueues the work, so
// the collectives themselves still run at once on Gloo's threads. LibTorch 1.13 has no recorder;
// the lock costs it too little to keep a second path.
std::mutex& IssueMutex() {
  static std::mutex mutex;
  return mutex;
}

// The tensor as Gloo can move it without arithmetic: flat, and without bf16 support bf16
// reinterpreted as fp16.
at::Tensor BitsView(const at::Tensor& t) {
  at::Tensor flat = t.view({-1});
#if TANDEM_GLOO_HAS_BF16
  return flat;
#else
  return flat.scalar_type() == at::kBFloat16 ? flat.view(at::kHalf) : flat;
#endif
}

// The dtype a reduction runs in (CheckCpuTensor admits fp32 and bf16): fp32, also for bf16 on every
// version (NOTE [Gloo emulation]).
at::ScalarType ReductionType(const at::Tensor&) { return at::kFloat; }

class GlooCommunicator final : public Communicator {
 public:
  GlooCommunicator(c10::intrusive_ptr<c10d::ProcessGroupGloo> group, int rank, int world_size,
                   std::string group_name)
      : group_(std::move(group)),
        rank_(rank),
        world_size_(world_size),
        group_name_(std::move(group_name)) {}

  int rank() const override { return rank_; }
  int world_size() const override { return world_size_; }
  const std::string& group_name() const override { return group_name_; }
  int64_t last_sequence() const override { return sequence_.load(); }

  std::shared_ptr<Work> AllReduceSum(at::Tensor tensor) override {
    const std::string what = Describe("all_reduce");
    if (absl::Status s = CheckCpuTensor(tensor, "tensor"); !s.ok()) return Fail(what, s);
    return Issue(what, [&]() -> Issued {
      if (tensor.scalar_type() == ReductionType(tensor)) {
        std::vector<at::Tensor> tensors{tensor};
        return {group_->allreduce(tensors), nullptr};
      }
      at::Tensor sum = tensor.to(ReductionType(tensor));
      std::vector<at::Tensor> tensors{sum};
      return {group_->allreduce(tensors), [tensor, sum] { tensor.copy_(sum); }};
    });
  }

  std::shared_ptr<Work> ReduceScatterSum(at::Tensor input, at::Tensor output) override {
    const std::string what = Describe("reduce_scatter");
    if (absl::Status s = CheckPair(input, output, "input", "output"); !s.ok()) {
      return Fail(what, s);
    }
    return Issue(what, [&]() -> Issued {
      at::Tensor sum =
          input.view({-1}).to(ReductionType(input), /*non_blocking=*/false, /*copy=*/true);
      std::vector<at::Tensor> tensors{sum};
      const int64_t n = output.numel();
      const int64_t offset = rank_ * n;
      return {group_->allreduce(tensors),
              [output, sum, offset, n] { output.view({-1}).copy_(sum.narrow(0, offset, n)); }};
    });
  }

  std::shared_ptr<Work> AllGather(at::Tensor input, at::Tensor output) override {
    const std::string what = Describe("all_gather");
    if (absl::Status s = CheckPair(output, input, "output", "input"); !s.ok()) {
      return Fail(what, s);
    }
    return Issue(what, [&]() -> Issued {
#if TANDEM_GLOO_HAS_ALLGATHER_BASE
      at::Tensor source = BitsView(input);
      at::Tensor destination = BitsView(output);
      return {group_->_allgather_base(destination, source), nullptr};
#else
      at::Tensor source = BitsView(input);
      const int64_t n = source.numel();
      at::Tensor gathered = at::empty({world_size_ * n}, source.options());
      std::vector<std::vector<at::Tensor>> outputs(1);
      for (int r = 0; r < world_size_; ++r) outputs[0].push_back(gathered.narrow(0, r * n, n));
      std::vector<at::Tensor> inputs{source};
      return {group_->allgather(outputs, inputs),
              [output, gathered] { BitsView(output).copy_(gathered); }};
#endif
    });
  }

  std::shared_ptr<Work> AllToAll(at::Tensor input, at::Tensor output) override {
    const std::string what = Describe("all_to_all");
    if (absl::Status s = CheckSwap(input, output); !s.ok()) return Fail(what, s);
    return Issue(what, [&]() -> Issued {
      at::Tensor source = BitsView(input);
      at::Tensor destination = BitsView(output);
      std::vector<int64_t> equal_splits;  // empty: world_size equal chunks
      return {group_->alltoall_base(destination, source, equal_splits, equal_splits), nullptr};
    });
  }

  std::shared_ptr<Work> Broadcast(at::Tensor tensor, int root) override {
    const std::string what = Describe("broadcast");
    if (absl::Status s = CheckCpuTensor(tensor, "tensor"); !s.ok()) return Fail(what, s);
    if (root < 0 || root >= world_size_) {
      return Fail(what, absl::InvalidArgumentError(absl::StrCat(
                            "root ", root, " is not a rank of a group of ", world_size_)));
    }
    return Issue(what, [&]() -> Issued {
      std::vector<at::Tensor> tensors{BitsView(tensor)};
      c10d::BroadcastOptions options;
      options.rootRank = root;
      return {group_->broadcast(tensors, options), nullptr};
    });
  }

  std::shared_ptr<Work> Barrier() override {
    const std::string what = Describe("barrier");
    return Issue(what, [&]() -> Issued { return {group_->barrier(), nullptr}; });
  }

 private:
  struct Issued {
    c10::intrusive_ptr<c10d::Work> work;
    std::function<void()> finish;
  };

  // Takes the next sequence number and names the operation for every message about it.
  std::string Describe(const char* operation) {
    const int64_t sequence = ++sequence_;
    return absl::StrCat("group '", group_name_, "' rank ", rank_, ": ", operation, " (sequence ",
                        sequence, ")");
  }

  static std::shared_ptr<Work> Fail(const std::string& what, const absl::Status& status) {
    return std::make_shared<ReadyWork>(
        absl::Status(status.code(), absl::StrCat(what, ": ", status.message())));
  }

  template <typename Fn>
  std::shared_ptr<Work> Issue(const std::string& what, Fn&& issue) {
    try {
      Issued issued = [&] {
        const std::lock_guard<std::mutex> lock(IssueMutex());
        return issue();
      }();
      return std::make_shared<GlooWork>(what, std::move(issued.work), std::move(issued.finish));
    } catch (const std::exception& e) {
      return Fail(what, absl::InternalError(Message(e)));
    }
  }

  // `large` must have world_size times the elements of `small`, with the same dtype.
  absl::Status CheckPair(const at::Tensor& large, const at::Tensor& small, const char* large_name,
                         const char* small_name) const {
    if (absl::Status s = CheckCpuTensor(large, large_name); !s.ok()) return s;
    if (absl::Status s = CheckCpuTensor(small, small_name); !s.ok()) return s;
    if (large.scalar_type() != small.scalar_type()) {
      return absl::InvalidArgumentError(
          absl::StrCat(large_name, " and ", small_name, " have different dtypes"));
    }
    if (large.numel() != world_size_ * small.numel()) {
      return absl::InvalidArgumentError(absl::StrCat(large_name, " has ", large.numel(),
                                                     " elements; need world_size (", world_size_,
                                                     ") x ", small.numel()));
    }
    return absl::OkStatus();
  }

  // An all-to-all's input and output: the same dtype and size, a multiple of the world size.
  absl::Status CheckSwap(const at::Tensor& input, const at::Tensor& output) const {
    if (absl::Status s = CheckCpuTensor(input, "input"); !s.ok()) return s;
    if (absl::Status s = CheckCpuTensor(output, "output"); !s.ok()) return s;
    if (input.scalar_type() != output.scalar_type() || input.numel() != output.numel() ||
        input.numel() % world_size_ != 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "input (", input.numel(), ") and output (", output.numel(),
          ") must have one dtype and the same multiple of world_size (", world_size_, ")"));
    }
    return absl::OkStatus();
  }

  const c10::intrusive_ptr<c10d::ProcessGroupGloo> group_;
  const int rank_;
  const int world_size_;
  const std::string group_name_;
  std::atomic<int64_t> sequence_{0};
};

}  // namespace

absl::StatusOr<std::shared_ptr<Communicator>> CreateGlooCommunicator(
    std::shared_ptr<KeyValueStore> store, int rank, int world_size, const GlooOptions& options) {
  const std::string what = absl::StrCat("group '", options.group_name, "' rank ", rank,
                                        ": joining a Gloo group of ", world_size, " ranks");
  if (store == nullptr) return absl::InvalidArgumentError(absl::StrCat(what, ": no store"));
  if (world_size < 1 || rank < 0 || rank >= world_size) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": rank out of range"));
  }
  auto adapter = c10::make_intrusive<KeyValueStoreAdapter>(
      std::move(store), absl::StrCat("gloo/", options.group_name, "/"), options.timeout);
  try {
    auto gloo_options = c10d::ProcessGroupGloo::Options::create(options.timeout);
    gloo_options->devices.push_back(
        c10d::ProcessGroupGloo::createDeviceForHostname(options.hostname));
    auto group =
        c10::make_intrusive<c10d::ProcessGroupGloo>(adapter, rank, world_size, gloo_options);
    return std::make_shared<GlooCommunicator>(std::move(group), rank, world_size,
                                              options.group_name);
  } catch (const std::exception& e) {
    absl::Status store_error = adapter->first_error();
    if (!store_error.ok()) {
      return absl::Status(store_error.code(), absl::StrCat(what, ": ", store_error.message()));
    }
    return absl::UnavailableError(absl::StrCat(what, " on ", options.hostname, ": ", Message(e)));
  }
}

}  // namespace tandem::engine
