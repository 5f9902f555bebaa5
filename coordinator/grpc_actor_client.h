// ActorClient (actor_client.h) over gRPC: each call is one tandem.v1.Actor rpc on a channel of
// its own per client (rpc::MakeChannel: the installed token and TLS), with a deadline per call.
//
// AssignJob answered UNAVAILABLE is tried again, `assign_attempts` times in all,
// `assign_retry_delay` apart: an actor's AssignJob never answers UNAVAILABLE itself, so it is the
// channel's (a connection that did not open, seen once on a loaded machine with every actor alive).
// An actor that is gone fails the same way each time, and its missing heartbeats end the attempt
// anyway. StopRetrying ends the retries (and the wait between them) at once.
//
// Thread-safety: as ActorClient; the factory may be shared by every runner.
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "coordinator/actor_client.h"

namespace tandem::coordinator {

struct GrpcActorClientOptions {
  // Deadline of every call but Release. The actors get a command timeout for each of their
  // transfers and collectives; the coordinator waits that long plus a margin (ForCommandTimeout).
  std::chrono::milliseconds command_deadline{330000};
  // Deadline of Release: it interrupts the command in flight, so a live actor answers at once.
  std::chrono::milliseconds release_deadline{30000};
  // REQUIRES: >= 1. AssignJob calls made in all while the channel answers UNAVAILABLE.
  int assign_attempts = 3;
  std::chrono::milliseconds assign_retry_delay{1000};

  // The options for actors whose command timeout is `command_timeout`: commands wait 30 s more.
  static GrpcActorClientOptions ForCommandTimeout(std::chrono::milliseconds command_timeout);
};

class GrpcActorClientFactory final : public ActorClientFactory {
 public:
  explicit GrpcActorClientFactory(const GrpcActorClientOptions& options) : options_(options) {}
  std::unique_ptr<ActorClient> Connect(const std::string& address,
                                       const std::string& name) override;

 private:
  const GrpcActorClientOptions options_;
};

}  // namespace tandem::coordinator
