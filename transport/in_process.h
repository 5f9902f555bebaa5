// A job's data plane inside one process: the two groups' ranks are threads, each with its own
// Inbox, and a send copies the bytes straight into the receiver's expected tensor (one memcpy, no
// socket). The colocated trainer runs both stages over it (trainer/colocated.cc), and tests run
// several ranks of each group as threads over it (tests/step/).
//
// A send to a transfer the receiver already expects completes in the sender's thread; one the
// receiver does not expect yet is delivered by a thread of its own, which waits for the
// expectation as a remote stream does (Inbox::Begin).
//
// Ranks may also be fibers of one thread (trainer/fiber.h): given a `yield` function, a wait
// (Await, SendHandle::Wait) polls and calls it between polls instead of blocking the thread.
//
// Thread-safe: each endpoint is used by its rank's thread (or fiber); Abort may be called from any
// thread.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "transport/inbox.h"
#include "transport/transport.h"

namespace tandem::transport {

class InProcessFabric {
 public:
  // Two groups (side 0 and side 1) of `ranks0` and `ranks1` ranks exchanging transfers of job
  // `transfer_key`. A sender waits up to `timeout` for its receiver to expect a transfer.
  // `yield`: called by a wait between polls, when the ranks are fibers of one thread; empty:
  // waits block.
  InProcessFabric(std::string transfer_key, int ranks0, int ranks1,
                  std::chrono::milliseconds timeout, std::function<void()> yield = nullptr);
  ~InProcessFabric();

  // The Transport of rank `rank` of side `side`: Send(p, ...) reaches rank p of the other side.
  std::shared_ptr<Transport> Endpoint(int side, int rank);

  // Ends the job on every inbox: Await calls in progress return Cancelled and sends waiting for an
  // expectation fail at once, so a rank blocked on a failed peer returns instead of timing out.
  void Abort();

 private:
  class EndpointTransport;
  std::string transfer_key_;
  std::chrono::milliseconds timeout_;
  std::function<void()> yield_;
  std::vector<std::vector<std::shared_ptr<Inbox>>> inboxes_;  // [side][rank]
};

}  // namespace tandem::transport
