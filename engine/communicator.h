// The collectives a ZeRO engine needs inside its group, behind one small interface (docs/design.md
// §3).
//
// Backends: Gloo (CPU, c10d ProcessGroupGloo), NCCL (GPU, raw NCCL; built with a CUDA LibTorch),
// single rank (world size 1, no communication) and a fake in-process group for tests that can
// inject failures. Every operation is asynchronous and reports its outcome once, through its Work
// handle.
//
// Contract for all backends:
// - Operations are matched across ranks by issue order: every rank issues the same operations in
// the
//   same order. Tensors are contiguous, on the communicator's device, fp32 or bf16.
// - A tensor passed to an operation must not be read or written by the caller until its Work
// completed.
// - Reductions of bf16 tensors may accumulate in fp32 internally (Gloo on LibTorch 1.13 has no
// bf16).
// - NCCL: operations are enqueued on the current CUDA stream of the tensor's device; Wait makes the
//   current stream wait and then blocks the host until completion.
// - Thread-safety: one thread issues operations at a time; Work handles may be waited on from any
// thread.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/kv_store.h"

namespace tandem::engine {

// Handle to one asynchronous collective.
class Work {
 public:
  virtual ~Work() = default;
  // True once the operation finished, successfully or not. Never blocks.
  virtual bool IsCompleted() = 0;
  // Blocks until the operation finishes or `timeout` passes. On timeout returns DeadlineExceeded
  // naming the group, this rank, the operation and its sequence number; otherwise the operation's
  // own status. Any later call returns the same status.
  virtual absl::Status Wait(std::chrono::milliseconds timeout) = 0;
};

class Communicator {
 public:
  virtual ~Communicator() = default;

  virtual int rank() const = 0;
  virtual int world_size() const = 0;
  // The group's name, used in every error message ("vision", "llm", "test").
  virtual const std::string& group_name() const = 0;
  // Sequence number of the last operation issued (0 before any): lets a stalled rank be named.
  virtual int64_t last_sequence() const = 0;

  // In-place sum across ranks.
  virtual std::shared_ptr<Work> AllReduceSum(at::Tensor tensor) = 0;
  // `input` has world_size * n elements, `output` n: output = sum over ranks of input's rank-th
  // chunk.
  virtual std::shared_ptr<Work> ReduceScatterSum(at::Tensor input, at::Tensor output) = 0;
  // `input` has n elements, `output` world_size * n: chunk r of output = input of rank r.
  // `input` may be this rank's chunk of `output` (in-place all-gather).
  virtual std::shared_ptr<Work> AllGather(at::Tensor input, at::Tensor output) = 0;
  // `input` and `output` have world_size * n elements each and do not overlap: chunk r of output
  // = chunk `rank()` of rank r's input (equal splits; DeepSpeed-Ulysses' sequence-to-heads swap).
  virtual std::shared_ptr<Work> AllToAll(at::Tensor input, at::Tensor output) = 0;
  // Every rank receives root's `tensor` in place.
  virtual std::shared_ptr<Work> Broadcast(at::Tensor tensor, int root) = 0;
  virtual std::shared_ptr<Work> Barrier() = 0;
};

struct GlooOptions {
  std::string group_name = "group";
  std::string hostname = "127.0.0.1";         // address this rank's Gloo device binds to
  std::chrono::milliseconds timeout{300000};  // Gloo's own per-operation timeout
};

// Joins a Gloo group of `world_size` ranks through `store` (all ranks pass stores that see each
// other's keys). Blocks until every rank joined or options.timeout passes (DeadlineExceeded).
absl::StatusOr<std::shared_ptr<Communicator>> CreateGlooCommunicator(
    std::shared_ptr<KeyValueStore> store, int rank, int world_size, const GlooOptions& options);

// World size 1: reductions are identities, all-gather copies.
std::shared_ptr<Communicator> CreateSingleRankCommunicator(std::string group_name = "single");

// The communicator a group's rank on `device` joins: single-rank for a group of one, NCCL for a
// CUDA device, Gloo otherwise. InvalidArgument for a CUDA group in a build without NCCL.
struct GroupOptions {
  std::string group_name = "group";
  std::string hostname = "127.0.0.1";  // Gloo: the address this rank's device binds to
  std::chrono::milliseconds timeout{300000};
};
absl::StatusOr<std::shared_ptr<Communicator>> CreateGroupCommunicator(
    std::shared_ptr<KeyValueStore> store, int rank, int world_size, const c10::Device& device,
    const GroupOptions& options);

#ifdef TANDEM_HAVE_NCCL
struct NcclOptions {
  std::string group_name = "group";
  int device_index = 0;
  std::chrono::milliseconds timeout{300000};  // rendezvous deadline
};
// Rank 0 creates the NCCL unique id and publishes it in `store`; all ranks init the communicator on
// their device. Collectives run on the tensor's current CUDA stream; Wait polls
// ncclCommGetAsyncError and aborts the communicator on timeout so no rank hangs forever.
absl::StatusOr<std::shared_ptr<Communicator>> CreateNcclCommunicator(
    std::shared_ptr<KeyValueStore> store, int rank, int world_size, const NcclOptions& options);
#endif

}  // namespace tandem::engine
