// The receiving side of the data plane: the transfers an actor expects, the tensors their bytes
// land in, and the validation of every incoming chunk against them (tandem.v1.Peer's error
// contract). Plain C++, no gRPC: the Peer service (transport/peer_service.h) feeds it chunks, the
// actor's Transport expects and awaits through it, and tests drive it directly.
//
// Thread-safe: any number of streams deliver while the actor expects, awaits and resets.
//
// NOTE [Expectation states]
//
//                 Begin (header matches)            Finish (every byte written)
//   Expect --> pending ---------------> receiving ----------------------------> complete
//                 ^                         |                                      |
//                 +-------------------------+                                  Await: OK,
//        refused chunk, early end of stream, Delivery dropped               removed, and remembered
//        (bytes received so far are forgotten; a retry starts again        as received (a duplicate
//         at offset 0)                                                      gets AlreadyExists)
//
//   pending / receiving / complete --Reset, SetJob, ClearJob, Await's timeout--> withdrawn
//   (removed)
//
// Withdrawing waits until no chunk is being copied into the destination, so once Reset, ClearJob or
// Await returned, the inbox never touches that tensor again and the caller may free it.
//
// A stream for a tag that is not expected yet waits (up to the wait passed to Begin) for the actor
// to expect it: a sender may run ahead of its receiver. A tag whose step is older than the newest
// step the inbox has seen expected for that kind is stale and refused at once.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/tensor_bytes.h"
#include "transport/transport.h"

namespace tandem::transport {

// What the first chunk of a stream declares.
struct TransferHeader {
  TransferTag tag;
  DType dtype = DType::kFloat32;
  std::vector<int64_t> shape;
  int64_t total_bytes = 0;
};

class Inbox {
 public:
  class Delivery;

  Inbox();
  // REQUIRES: no Delivery is alive.
  ~Inbox();
  Inbox(const Inbox&) = delete;
  Inbox& operator=(const Inbox&) = delete;

  // The actor's current job: only its transfers are accepted. Withdraws every expectation of a
  // previous job and forgets its steps.
  void SetJob(std::string job_id);

  // No job: withdraws every expectation (Await calls in progress return Cancelled, streams in
  // progress FailedPrecondition) and refuses every chunk with FailedPrecondition.
  void ClearJob();

  // Transport::Expect. FailedPrecondition without a job; InvalidArgument for another job's tag, a
  // destination whose byte count does not match its dtype and shape, or a tag already expected.
  absl::Status Expect(const TransferTag& tag, TensorBytes destination);

  // Transport::Await. OK once complete; Cancelled when withdrawn by Reset, SetJob or ClearJob;
  // DeadlineExceeded naming the tag and the bytes that arrived; NotFound when not expected.
  absl::Status Await(const TransferTag& tag, std::chrono::milliseconds timeout);

  // Whether Await(tag, ...) would return at once: the transfer is complete, withdrawn, or not
  // expected. For a receiver that polls instead of blocking (trainer/colocated.cc's fibers).
  bool Ready(const TransferTag& tag);
  // Transport::Reset: withdraws every expectation (streams in progress get Cancelled). Keeps the
  // job and the steps seen, so late chunks of earlier steps stay stale.
  void Reset();

  // Starts receiving the transfer `header` declares, waiting up to `wait` for it to be expected.
  //   FailedPrecondition  no current job.
  //   InvalidArgument     another job; a stale step; dtype, shape or total_bytes unlike the
  //                       destination.
  //   AlreadyExists       received completely already, or another stream is receiving it.
  //   DeadlineExceeded    not expected within `wait`.
  // The Delivery then takes the chunks, the first one included.
  absl::StatusOr<Delivery> Begin(const TransferHeader& header, std::chrono::milliseconds wait);

 private:
  struct Slot;
  struct TagLess {
    bool operator()(const TransferTag& a, const TransferTag& b) const;
  };

  absl::Status CheckJobLocked(const TransferTag& tag) const;
  // Marks `slots` withdrawn for `reason` (what their senders are told) and waits until none of them
  // is being written. The caller removed them from expected_.
  void WithdrawLocked(std::unique_lock<std::mutex>& lock,
                      const std::vector<std::shared_ptr<Slot>>& slots, const absl::Status& reason);
  void WithdrawAllLocked(std::unique_lock<std::mutex>& lock, const absl::Status& reason);
  absl::Status Write(Delivery& delivery, const TransferTag& tag, int64_t offset,
                     std::string_view bytes);
  absl::StatusOr<int64_t> Finish(Delivery& delivery);
  void Abandon(Slot& slot);

  std::mutex mu_;
  std::condition_variable
      changed_;  // an expectation came, completed or was withdrawn; a write ended
  std::optional<std::string> job_;
  std::map<TransferTag, std::shared_ptr<Slot>, TagLess> expected_;
  // Received and awaited, kept while their step is not stale (then staleness answers for them).
  std::set<TransferTag, TagLess> received_;
  std::map<TransferKind, int64_t> newest_step_;  // the newest step expected, per kind
};

// One stream delivering one expected transfer, from Begin to Finish. Used by one thread at a time.
// Dropping it unfinished puts the transfer back to pending.
class Inbox::Delivery {
 public:
  Delivery(Delivery&& other) noexcept;
  Delivery& operator=(Delivery&& other) noexcept;
  ~Delivery();

  // Copies `bytes` into the destination at `offset`. InvalidArgument (and the delivery ends) when
  // `tag` is not the first chunk's, `offset` is not the number of bytes received so far, or the
  // bytes run past the end; Cancelled or FailedPrecondition when the expectation was withdrawn
  // meanwhile.
  absl::Status Write(const TransferTag& tag, int64_t offset, std::string_view bytes);

  // Ends the stream: the bytes received (the whole tensor) and the transfer complete, or
  // InvalidArgument when bytes are missing.
  absl::StatusOr<int64_t> Finish();

 private:
  friend class Inbox;
  Delivery(Inbox* inbox, std::shared_ptr<Slot> slot);

  Inbox* inbox_ = nullptr;
  std::shared_ptr<Slot> slot_;  // null once ended
};

}  // namespace tandem::transport
