// `tandem actor`: one actor process (docs/design.md §1). Serves tandem.v1.Actor and tandem.v1.Peer
// on one port, registers with the coordinator under a pool name, heartbeats with its job, step and
// phase, and runs what it is assigned until SIGINT or SIGTERM. Torch-free header (the CLI includes
// it).
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

namespace tandem::actors {

struct ActorOptions {
  std::string pool = "vision";                 // pool to join
  std::string coordinator = "127.0.0.1:7070";  // HOST:PORT
  std::string listen = "127.0.0.1:0";          // HOST:PORT to serve on; port 0 lets the OS pick
  // HOST:PORT other processes reach this actor at; "" = the listen host with the bound port.
  std::string advertise;
  std::string device = "cpu";  // "cpu" or "cuda:N"
  // The memory a job may use here, which the actor tells the coordinator (a job whose group's
  // estimated memory exceeds it is refused); 0: the device's (platform::DeviceMemoryBytes).
  int64_t memory_bytes = 0;
  // How long to keep trying to reach the coordinator at start before giving up.
  std::chrono::milliseconds connect_timeout{60000};
  // Written (atomically) with this actor's address once it serves and is registered; "" for none.
  std::string ready_file;
  // Serve a local endpoint and send over local links to peers on the same host
  // (transport/local_link.h); false keeps every transfer on gRPC.
  bool local_links = true;
};

// Runs until SIGINT/SIGTERM (exit code 0) or a fatal error (non-zero, after printing it).
int RunActor(const ActorOptions& options);

}  // namespace tandem::actors
