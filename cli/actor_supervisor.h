// `tandem actor --supervise`: the actor runs as a child process of this one, which tells the
// coordinator why it ended (its exit code, the signal that killed it, or the kernel's out-of-memory
// killer: common/process_exit.h) and starts it again, as `tandem run` does for its actors. A job
// of the actor then restarts naming the cause instead of "lost contact".
#pragma once

#include <string>

#include "proto/tandem/v1/coordinator.grpc.pb.h"

namespace tandem::cli {

// Tells the coordinator that the actor process at `address` ended and `why` (ReportActorExit);
// logs a warning when the coordinator cannot be told. `tandem run` reports its actors this way too.
void ReportActorExit(v1::Coordinator::Stub& coordinator, const std::string& address,
                     const std::string& why);

// The actor child gets this process's own command line without --supervise and --ready-file.
struct SupervisedActor {
  std::string coordinator;  // HOST:PORT, where exits are reported
  std::string ready_file;   // written with the actor's address each time it is ready; "" for none
};

// Runs until SIGINT or SIGTERM, which it passes on to the actor (exit code 0), or until the actor
// exits with code 2 (its flags are wrong: starting it again would not help), which it returns.
// Between starts it waits 1 s, doubling up to 30 s while the actor keeps ending within a minute.
int SuperviseActor(const SupervisedActor& actor);

}  // namespace tandem::cli
