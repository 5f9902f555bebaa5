// The data plane between a job's two groups, behind one small interface (docs/design.md §2, §5):
// the actors' step logic posts what it expects to receive, sends slices to the other group's ranks,
// and waits, without knowing how bytes travel. The implementation (transport/grpc_transport.h)
// sends over tandem.v1.Peer streams, or over a local link (a Unix socket, transport/local_link.h)
// to a peer on the same host; a same-GPU (CUDA IPC) or NCCL path can be added per actor pair behind
// the same calls.
//
// Torch-free and gRPC-free: torch code includes it, and hands tensors over as TensorBytes.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "common/tensor_bytes.h"

namespace tandem::transport {

// Values match tandem.v1.TransferKind.
enum class TransferKind : int {
  kEmbeddings = 1,
  kGradients = 2,
  kEvalEmbeddings = 3,
  kGradSquares = 4,
  kBadSamples = 5,
  kTextTokens = 6,
  kSnapshot = 7
};

const char* TransferKindName(TransferKind kind);

// Identifies one transfer (tandem.v1.TransferTag).
struct TransferTag {
  std::string job_id;
  TransferKind kind = TransferKind::kEmbeddings;
  int64_t step = 0;
  int64_t micro_batch = 0;
  int64_t sample_begin = 0;  // [sample_begin, sample_end) of the micro-batch
  int64_t sample_end = 0;
  int32_t source_rank = 0;  // the sender's rank in its group

  friend bool operator==(const TransferTag&, const TransferTag&) = default;
};

// "embeddings job-000001 step 3 micro-batch 1 samples [0, 8) from rank 0"
std::string DescribeTag(const TransferTag& tag);

// An asynchronous send. The source bytes must stay valid and unchanged until Wait returned.
class SendHandle {
 public:
  virtual ~SendHandle() = default;
  // The transfer's outcome: OK once the receiver acknowledged every byte; the receiver's error
  // otherwise (naming the peer and the tag); DeadlineExceeded if it did not finish by `timeout`.
  virtual absl::Status Wait(std::chrono::milliseconds timeout) = 0;
};

class Transport {
 public:
  virtual ~Transport() = default;

  // Registers a transfer this actor will receive and where its bytes land: `destination` has the
  // exact dtype, shape and byte count the sender must send, and stays valid until Await returned
  // (or Reset). InvalidArgument if the same tag is already expected.
  virtual absl::Status Expect(const TransferTag& tag, TensorBytes destination) = 0;

  // Waits until the expected transfer `tag` arrived completely. DeadlineExceeded naming the tag and
  // the expected sender when it did not within `timeout`; NotFound if `tag` was never expected.
  // The expectation is removed once Await returns.
  virtual absl::Status Await(const TransferTag& tag, std::chrono::milliseconds timeout) = 0;

  // Sends `source` to rank `peer_rank` of the other group.
  virtual std::unique_ptr<SendHandle> Send(int peer_rank, const TransferTag& tag,
                                           TensorBytes source) = 0;

  // Forgets every pending expectation (when a job ends or fails): later chunks for them are
  // refused, and Await calls in progress return Cancelled.
  virtual void Reset() = 0;
};

}  // namespace tandem::transport
