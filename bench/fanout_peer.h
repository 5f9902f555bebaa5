// A bench process's end of the actors' transport (transport/grpc_transport.h), behind a header free
// of gRPC and LibTorch so that tandem-fanout-bench's LibTorch side can hold it: it serves a
// PeerService on a port of 127.0.0.1 (and a local listener it advertises, as every actor does) and
// sends to the peers whose addresses it is given.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "transport/transport.h"

namespace tandem::bench {

class FanoutPeer {
 public:
  // Serves this process's inbox for `job_id`'s transfers.
  static absl::StatusOr<std::unique_ptr<FanoutPeer>> Serve(const std::string& job_id);
  ~FanoutPeer();

  const std::string& address() const;  // 127.0.0.1:PORT
  // Sends to peer r at peer_addresses[r], over a local link when `local_links` (else gRPC).
  // Expect and Await go to this process's inbox.
  void Connect(std::vector<std::string> peer_addresses, bool local_links,
               std::chrono::milliseconds timeout);
  transport::Transport& transport();

 private:
  struct State;
  explicit FanoutPeer(std::unique_ptr<State> state);
  std::unique_ptr<State> state_;
};

}  // namespace tandem::bench
