// NCCL backend of communicator.h: raw NCCL (not c10d's ProcessGroupNCCL), so the same code serves
// every LibTorch version; see the toolchain research, section 4.
//
// Rendezvous: rank 0 publishes ncclGetUniqueId under "nccl/<group>/unique_id" in the store, the
// other ranks read it (waiting up to options.timeout), then every rank initialises a non-blocking
// communicator on its device, so a rank that never arrives makes the others fail with
// DeadlineExceeded instead of hanging.
//
// Streams: a collective is enqueued on the current CUDA stream of the communicator's device, and an
// event recorded after it marks its completion. Tensors stay referenced by the Work until it is
// destroyed. Wait makes the caller's current stream wait on the event, then polls the event and
// ncclCommGetAsyncError with short, growing sleeps. On timeout or on an asynchronous NCCL error the
// communicator is aborted (ncclCommAbort), so no rank hangs forever; every later operation then
// fails with Aborted. CUDA and NCCL error codes become a Status naming the call, file and line.
#ifdef TANDEM_HAVE_NCCL

#include <ATen/ATen.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>
#include <nccl.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "engine/communicator.h"
#include "engine/communicator_checks.h"

namespace tandem::engine {
namespace {

using Clock = std::chrono::steady_clock;

absl::Status CudaError(cudaError_t error, const char* call, const char* file, int line) {
  if (error == cudaSuccess) return absl::OkStatus();
  return absl::InternalError(absl::StrCat(file, ":", line, ": ", call, ": ",
                                          cudaGetErrorName(error), " (", cudaGetErrorString(error),
                                          ")"));
}

absl::StatusCode NcclCode(ncclResult_t result) {
  switch (result) {
    case ncclInvalidArgument:
    case ncclInvalidUsage:
      return absl::StatusCode::kInvalidArgument;
    case ncclRemoteError:
    case ncclSystemError:
      return absl::StatusCode::kUnavailable;
    default:
      return absl::StatusCode::kInternal;
  }
}

// ncclInProgress counts as success: on a non-blocking communicator the caller then waits for it
// (SettleLocked).
absl::Status NcclError(ncclComm_t comm, ncclResult_t result, const char* call, const char* file,
                       int line) {
  if (result == ncclSuccess || result == ncclInProgress) return absl::OkStatus();
  std::string detail = ncclGetErrorString(result);
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 13, 0)
  const char* last = ncclGetLastError(comm);
  if (last != nullptr && last[0] != '\0') absl::StrAppend(&detail, ": ", last);
#endif
  return absl::Status(NcclCode(result), absl::StrCat(file, ":", line, ": ", call, ": ", detail));
}

#define TANDEM_CUDA_STATUS(call) CudaError((call), #call, __FILE__, __LINE__)
#define TANDEM_NCCL_STATUS(comm, call) NcclError((comm), (call), #call, __FILE__, __LINE__)

std::string Message(const std::exception& e) {
  if (const auto* error = dynamic_cast<const c10::Error*>(&e)) {
    return error->what_without_backtrace();
  }
  return e.what();
}

// Sleeps of 20 us doubling up to 1 ms, never past the deadline.
class Backoff {
 public:
  void Sleep(Clock::time_point deadline) {
    const auto now = Clock::now();
    if (now >= deadline) return;
    std::this_thread::sleep_for(std::min<Clock::duration>(interval_, deadline - now));
    interval_ = std::min(interval_ * 2, std::chrono::microseconds(1000));
  }

 private:
  std::chrono::microseconds interval_{20};
};

// The NCCL communicator shared by a Communicator and its Works. Every NCCL call on it is serialised
// by mu_, because ncclCommAbort frees the communicator: after it, only the recorded reason is used.
class NcclComm {
 public:
  NcclComm(ncclComm_t comm, int device) : comm_(comm), device_(device) {}

  ~NcclComm() {
    c10::cuda::CUDAGuard guard(static_cast<c10::DeviceIndex>(device_));
    std::lock_guard<std::mutex> lock(mu_);
    if (aborted_) return;
    // Flush outstanding work for a bounded time; a peer that is gone makes this an abort instead.
    ncclResult_t finalize = ncclCommFinalize(comm_);
    if ((finalize == ncclSuccess || finalize == ncclInProgress) &&
        PollLocked(Clock::now() + std::chrono::seconds(10)) == ncclSuccess) {
      ncclCommDestroy(comm_);
    } else {
      ncclCommAbort(comm_);
    }
  }

  NcclComm(const NcclComm&) = delete;
  NcclComm& operator=(const NcclComm&) = delete;

  int device() const { return device_; }
  std::mutex& mu() { return mu_; }

  // REQUIRES: mu_ held, and the communicator not aborted (AbortedLocked() is OK).
  ncclComm_t GetLocked() const { return comm_; }

  // The reason once aborted; OK while usable. REQUIRES: mu_ held.
  absl::Status AbortedLocked() const { return abort_reason_; }

  // Waits until the communicator left ncclInProgress (non-blocking init or enqueue). On timeout it
  // aborts the communicator and returns DeadlineExceeded. REQUIRES: mu_ held, not aborted.
  absl::Status SettleLocked(Clock::time_point deadline) {
    ncclResult_t state = PollLocked(deadline);
    if (state == ncclInProgress) {
      absl::Status timeout = absl::DeadlineExceededError("NCCL did not finish in time");
      AbortLocked(timeout);
      return absl::DeadlineExceededError(
          absl::StrCat(timeout.message(), "; the NCCL communicator was aborted"));
    }
    if (state != ncclSuccess) {
      absl::Status error = TANDEM_NCCL_STATUS(comm_, state);
      AbortLocked(error);
      return error;
    }
    return absl::OkStatus();
  }

  // The outcome of the work that `event` follows, once known; nullopt while it runs. An
  // asynchronous NCCL error aborts the communicator (NCCL's required recovery); after an abort
  // every query returns the abort's reason, since an aborted collective's event completes too.
  std::optional<absl::Status> Query(cudaEvent_t event) {
    std::lock_guard<std::mutex> lock(mu_);
    if (aborted_) return abort_reason_;
    cudaError_t query = cudaEventQuery(event);
    if (query == cudaSuccess) return absl::OkStatus();
    if (query != cudaErrorNotReady) return TANDEM_CUDA_STATUS(query);
    ncclResult_t state = AsyncStateLocked();
    if (state == ncclSuccess || state == ncclInProgress) return std::nullopt;
    absl::Status error = TANDEM_NCCL_STATUS(comm_, state);
    AbortLocked(error);
    return error;
  }

  void Abort(const absl::Status& reason) {
    std::lock_guard<std::mutex> lock(mu_);
    AbortLocked(reason);
  }

 private:
  void AbortLocked(const absl::Status& reason) {
    if (aborted_) return;
    c10::cuda::CUDAGuard guard(static_cast<c10::DeviceIndex>(device_));
    ncclCommAbort(comm_);
    aborted_ = true;
    abort_reason_ = absl::AbortedError(
        absl::StrCat("the NCCL communicator was aborted after: ", reason.message()));
  }

  // ncclSuccess, ncclInProgress (still running) or the asynchronous error; never blocks.
  ncclResult_t AsyncStateLocked() {
    ncclResult_t state = ncclSuccess;
    ncclResult_t result = ncclCommGetAsyncError(comm_, &state);
    return result != ncclSuccess ? result : state;
  }

  ncclResult_t PollLocked(Clock::time_point deadline) {
    Backoff backoff;
    while (true) {
      ncclResult_t state = AsyncStateLocked();
      if (state != ncclInProgress || Clock::now() >= deadline) return state;
      backoff.Sleep(deadline);
    }
  }

  const ncclComm_t comm_;
  const int device_;
  std::mutex mu_;
  bool aborted_ = false;       // guarded by mu_
  absl::Status abort_reason_;  // guarded by mu_
};

class NcclWork final : public Work {
 public:
  NcclWork(std::string what, std::shared_ptr<NcclComm> comm, cudaEvent_t event,
           std::vector<at::Tensor> tensors)
      : what_(std::move(what)),
        comm_(std::move(comm)),
        event_(event),
        tensors_(std::move(tensors)) {}

  ~NcclWork() override {
    c10::cuda::CUDAGuard guard(static_cast<c10::DeviceIndex>(comm_->device()));
    cudaEventDestroy(event_);
  }

  bool IsCompleted() override {
    std::lock_guard<std::mutex> lock(mu_);
    if (status_.has_value()) return true;
    std::optional<absl::Status> outcome = comm_->Query(event_);
    if (outcome.has_value()) status_ = WithContext(what_, *outcome);
    return status_.has_value();
  }

  absl::Status Wait(std::chrono::milliseconds timeout) override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (status_.has_value()) return *status_;
    }
    const auto deadline = Clock::now() + timeout;
    std::optional<absl::Status> outcome;
    try {
      // Orders the caller's later work on its current stream after the collective.
      c10::cuda::CUDAGuard guard(static_cast<c10::DeviceIndex>(comm_->device()));
      cudaStream_t current = c10::cuda::getCurrentCUDAStream(comm_->device()).stream();
      absl::Status wait = TANDEM_CUDA_STATUS(cudaStreamWaitEvent(current, event_, 0));
      if (!wait.ok()) outcome = wait;
    } catch (const std::exception& e) {
      outcome = absl::InternalError(Message(e));
    }
    Backoff backoff;
    while (!outcome.has_value()) {
      outcome = comm_->Query(event_);
      if (outcome.has_value()) break;
      if (Clock::now() >= deadline) {
        const std::string message =
            absl::StrCat(what_, " did not complete within ", timeout.count(), " ms");
        comm_->Abort(absl::DeadlineExceededError(message));
        outcome = absl::DeadlineExceededError(
            absl::StrCat(message, "; the NCCL communicator was aborted"));
        std::lock_guard<std::mutex> lock(mu_);
        if (!status_.has_value()) status_ = *outcome;
        return *status_;
      }
      backoff.Sleep(deadline);
    }
    std::lock_guard<std::mutex> lock(mu_);
    if (!status_.has_value()) status_ = WithContext(what_, *outcome);
    return *status_;
  }

 private:
  const std::string what_;
  const std::shared_ptr<NcclComm> comm_;
  const cudaEvent_t event_;
  const std::vector<at::Tensor> tensors_;  // kept alive until the Work is destroyed
  std::mutex mu_;
  std::optional<absl::Status> status_;  // guarded by mu_; set once
};

absl::StatusOr<ncclDataType_t> NcclType(at::ScalarType type) {
  switch (type) {
    case at::kFloat:
      return ncclFloat32;
    case at::kBFloat16:
      return ncclBfloat16;
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("dtype ", c10::toString(type), " is not supported; need fp32 or bf16"));
  }
}

class NcclCommunicator final : public Communicator {
 public:
  NcclCommunicator(std::shared_ptr<NcclComm> comm, int rank, int world_size, std::string group_name,
                   std::chrono::milliseconds enqueue_timeout)
      : comm_(std::move(comm)),
        rank_(rank),
        world_size_(world_size),
        group_name_(std::move(group_name)),
        enqueue_timeout_(enqueue_timeout) {}

  int rank() const override { return rank_; }
  int world_size() const override { return world_size_; }
  const std::string& group_name() const override { return group_name_; }
  int64_t last_sequence() const override { return sequence_.load(); }

  std::shared_ptr<Work> AllReduceSum(at::Tensor tensor) override {
    const std::string what = Describe("all_reduce");
    return Issue(what, {tensor}, CheckTensor(tensor, "tensor"),
                 [&](ncclComm_t comm, ncclDataType_t type, cudaStream_t stream) {
                   return TANDEM_NCCL_STATUS(
                       comm, ncclAllReduce(tensor.data_ptr(), tensor.data_ptr(), tensor.numel(),
                                           type, ncclSum, comm, stream));
                 });
  }

  std::shared_ptr<Work> ReduceScatterSum(at::Tensor input, at::Tensor output) override {
    const std::string what = Describe("reduce_scatter");
    return Issue(what, {input, output}, CheckPair(input, output, "input", "output"),
                 [&](ncclComm_t comm, ncclDataType_t type, cudaStream_t stream) {
                   return TANDEM_NCCL_STATUS(
                       comm, ncclReduceScatter(input.data_ptr(), output.data_ptr(), output.numel(),
                                               type, ncclSum, comm, stream));
                 });
  }

  // In place when input is this rank's chunk of output: NCCL supports exactly that aliasing.
  std::shared_ptr<Work> AllGather(at::Tensor input, at::Tensor output) override {
    const std::string what = Describe("all_gather");
    return Issue(what, {input, output}, CheckPair(output, input, "output", "input"),
                 [&](ncclComm_t comm, ncclDataType_t type, cudaStream_t stream) {
                   return TANDEM_NCCL_STATUS(
                       comm, ncclAllGather(input.data_ptr(), output.data_ptr(), input.numel(), type,
                                           comm, stream));
                 });
  }

  // Grouped point-to-point calls (NCCL has no all-to-all primitive; as c10d's ProcessGroupNCCL).
  std::shared_ptr<Work> AllToAll(at::Tensor input, at::Tensor output) override {
    const std::string what = Describe("all_to_all");
    absl::Status valid = CheckTensor(input, "input");
    if (valid.ok()) valid = CheckTensor(output, "output");
    if (valid.ok() && (input.scalar_type() != output.scalar_type() ||
                       input.numel() != output.numel() || input.numel() % world_size_ != 0)) {
      valid = absl::InvalidArgumentError(absl::StrCat(
          "input (", input.numel(), ") and output (", output.numel(),
          ") must have one dtype and the same multiple of world_size (", world_size_, ")"));
    }
    return Issue(what, {input, output}, valid,
                 [&](ncclComm_t comm, ncclDataType_t type, cudaStream_t stream) -> absl::Status {
                   const int64_t n = input.numel() / world_size_;
                   const int64_t bytes = n * input.element_size();
                   auto* source = static_cast<char*>(input.data_ptr());
                   auto* destination = static_cast<char*>(output.data_ptr());
                   RETURN_IF_ERROR(TANDEM_NCCL_STATUS(comm, ncclGroupStart()));
                   for (int peer = 0; peer < world_size_; ++peer) {
                     absl::Status sent = TANDEM_NCCL_STATUS(
                         comm, ncclSend(source + peer * bytes, n, type, peer, comm, stream));
                     absl::Status received = TANDEM_NCCL_STATUS(
                         comm, ncclRecv(destination + peer * bytes, n, type, peer, comm, stream));
                     if (!sent.ok() || !received.ok()) {
                       (void)ncclGroupEnd();
                       return sent.ok() ? received : sent;
                     }
                   }
                   return TANDEM_NCCL_STATUS(comm, ncclGroupEnd());
                 });
  }

  std::shared_ptr<Work> Broadcast(at::Tensor tensor, int root) override {
    const std::string what = Describe("broadcast");
    absl::Status valid = CheckTensor(tensor, "tensor");
    if (valid.ok() && (root < 0 || root >= world_size_)) {
      valid = absl::InvalidArgumentError(
          absl::StrCat("root ", root, " is not a rank of a group of ", world_size_));
    }
    return Issue(
        what, {tensor}, valid, [&](ncclComm_t comm, ncclDataType_t type, cudaStream_t stream) {
          return TANDEM_NCCL_STATUS(comm, ncclBroadcast(tensor.data_ptr(), tensor.data_ptr(),
                                                        tensor.numel(), type, root, comm, stream));
        });
  }

  // NCCL has no barrier: an all-reduce of one element stands in for it.
  std::shared_ptr<Work> Barrier() override {
    const std::string what = Describe("barrier");
    at::Tensor token;
    absl::Status valid;
    try {
      c10::cuda::CUDAGuard guard(static_cast<c10::DeviceIndex>(comm_->device()));
      token =
          at::zeros({1}, at::TensorOptions().dtype(at::kFloat).device(at::kCUDA, comm_->device()));
    } catch (const std::exception& e) {
      valid = absl::InternalError(Message(e));
    }
    return Issue(what, {token}, valid,
                 [&](ncclComm_t comm, ncclDataType_t type, cudaStream_t stream) {
                   return TANDEM_NCCL_STATUS(comm, ncclAllReduce(token.data_ptr(), token.data_ptr(),
                                                                 1, type, ncclSum, comm, stream));
                 });
  }

 private:
  std::string Describe(const char* operation) {
    const int64_t sequence = ++sequence_;
    return absl::StrCat("group '", group_name_, "' rank ", rank_, ": ", operation, " (sequence ",
                        sequence, ")");
  }

  // The shared layout checks (communicator_checks.h), this communicator's device and NCCL's dtypes.
  absl::Status CheckTensor(const at::Tensor& t, const char* name) const {
    if (t.defined() && (!t.is_cuda() || t.device().index() != comm_->device())) {
      return absl::InvalidArgumentError(absl::StrCat(
          name, " is on ", t.device().str(), "; the communicator is on cuda:", comm_->device()));
    }
    if (absl::Status layout = CheckTensorLayout(t, name); !layout.ok()) return layout;
    return NcclType(t.scalar_type()).status();
  }

  absl::Status CheckPair(const at::Tensor& large, const at::Tensor& small, const char* large_name,
                         const char* small_name) const {
    if (absl::Status s = CheckTensor(large, large_name); !s.ok()) return s;
    if (absl::Status s = CheckTensor(small, small_name); !s.ok()) return s;
    if (large.scalar_type() != small.scalar_type() ||
        large.numel() != world_size_ * small.numel()) {
      return absl::InvalidArgumentError(absl::StrCat(
          large_name, " must have the dtype of ", small_name, " and world_size (", world_size_,
          ") times its ", small.numel(), " elements; it has ", large.numel()));
    }
    return absl::OkStatus();
  }

  // Enqueues `enqueue` on the current stream and records the completion event after it.
  template <typename Enqueue>
  std::shared_ptr<Work> Issue(const std::string& what, std::vector<at::Tensor> tensors,
                              const absl::Status& valid, Enqueue&& enqueue) {
    if (!valid.ok()) return std::make_shared<ReadyWork>(WithContext(what, valid));
    cudaEvent_t event = nullptr;
    absl::Status status = [&]() -> absl::Status {
      std::lock_guard<std::mutex> lock(comm_->mu());
      RETURN_IF_ERROR(comm_->AbortedLocked());
      c10::cuda::CUDAGuard guard(static_cast<c10::DeviceIndex>(comm_->device()));
      cudaStream_t stream = c10::cuda::getCurrentCUDAStream(comm_->device()).stream();
      ASSIGN_OR_RETURN(ncclDataType_t type, NcclType(tensors.front().scalar_type()));
      RETURN_IF_ERROR(enqueue(comm_->GetLocked(), type, stream));
      RETURN_IF_ERROR(comm_->SettleLocked(Clock::now() + enqueue_timeout_));
      RETURN_IF_ERROR(TANDEM_CUDA_STATUS(cudaEventCreateWithFlags(&event, cudaEventDisableTiming)));
      return TANDEM_CUDA_STATUS(cudaEventRecord(event, stream));
    }();
    if (!status.ok()) {
      if (event != nullptr) cudaEventDestroy(event);
      return std::make_shared<ReadyWork>(WithContext(what, status));
    }
    return std::make_shared<NcclWork>(what, comm_, event, std::move(tensors));
  }

  const std::shared_ptr<NcclComm> comm_;
  const int rank_;
  const int world_size_;
  const std::string group_name_;
  const std::chrono::milliseconds enqueue_timeout_;
  std::atomic<int64_t> sequence_{0};
};

absl::StatusOr<std::shared_ptr<Communicator>> Create(KeyValueStore& store, int rank, int world_size,
                                                     const NcclOptions& options) {
  const auto deadline = Clock::now() + options.timeout;
  const std::string key = absl::StrCat("nccl/", options.group_name, "/unique_id");
  ncclUniqueId id;
  if (rank == 0) {
    RETURN_IF_ERROR(TANDEM_NCCL_STATUS(nullptr, ncclGetUniqueId(&id)));
    RETURN_IF_ERROR(store.Set(key, std::string(id.internal, sizeof(id.internal))));
  } else {
    ASSIGN_OR_RETURN(std::string bytes, store.Get(key, options.timeout));
    if (bytes.size() != sizeof(id.internal)) {
      return absl::DataLossError(absl::StrCat("the unique id under \"", key, "\" has ",
                                              bytes.size(), " bytes, not ", sizeof(id.internal)));
    }
    std::memcpy(id.internal, bytes.data(), sizeof(id.internal));
  }

  c10::cuda::CUDAGuard guard(static_cast<c10::DeviceIndex>(options.device_index));
  ncclComm_t comm = nullptr;
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 14, 0)
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  absl::Status init =
      TANDEM_NCCL_STATUS(nullptr, ncclCommInitRankConfig(&comm, world_size, id, rank, &config));
#else
  // Older NCCL has no non-blocking init: a rank that never arrives blocks this call.
  absl::Status init = TANDEM_NCCL_STATUS(nullptr, ncclCommInitRank(&comm, world_size, id, rank));
#endif
  if (!init.ok()) {
    if (comm != nullptr) ncclCommAbort(comm);
    return init;
  }
  auto shared = std::make_shared<NcclComm>(comm, options.device_index);
  {
    std::lock_guard<std::mutex> lock(shared->mu());
    RETURN_IF_ERROR(shared->SettleLocked(deadline));
  }
  return std::make_shared<NcclCommunicator>(std::move(shared), rank, world_size, options.group_name,
                                            options.timeout);
}

}  // namespace

absl::StatusOr<std::shared_ptr<Communicator>> CreateNcclCommunicator(
    std::shared_ptr<KeyValueStore> store, int rank, int world_size, const NcclOptions& options) {
  const std::string what =
      absl::StrCat("group '", options.group_name, "' rank ", rank, ": joining an NCCL group of ",
                   world_size, " ranks on cuda:", options.device_index);
  if (store == nullptr) return absl::InvalidArgumentError(absl::StrCat(what, ": no store"));
  if (world_size < 1 || rank < 0 || rank >= world_size) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": rank out of range"));
  }
  try {
    auto communicator = Create(*store, rank, world_size, options);
    if (!communicator.ok()) return WithContext(what, communicator.status());
    return communicator;
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat(what, ": ", Message(e)));
  }
}

}  // namespace tandem::engine

#endif  // TANDEM_HAVE_NCCL
