// `tandem coordinator`: serves tandem.v1.Coordinator until SIGINT or SIGTERM. Torch-free header.
#pragma once

#include <chrono>
#include <string>

namespace tandem::coordinator {

struct CoordinatorServerOptions {
  std::string listen = "127.0.0.1:7070";   // HOST:PORT; port 0 lets the OS pick
  std::string state_dir = "tandem-state";  // tandem.db and default run directories
  std::chrono::milliseconds heartbeat_timeout{10000};
  std::chrono::milliseconds command_timeout{300000};
  std::chrono::milliseconds unplaceable_timeout{600000};  // CoordinatorOptions::unplaceable_timeout
  // HOST:PORT of the Prometheus endpoint (/metrics, /healthz); "" for none.
  std::string metrics_listen;
  // Written (atomically) with the bound HOST:PORT once serving, and "metrics HOST:PORT" on a second
  // line when metrics_listen is set; "" for none.
  std::string ready_file;
  // Testing only (`--test-hold-dir`, hidden from --help): a job named NAME does not start step S+1
  // while <hold_dir>/NAME.hold exists and holds S (coordinator/step_hold.h); "" holds no job.
  std::string hold_dir;
};

int RunCoordinator(const CoordinatorServerOptions& options);

}  // namespace tandem::coordinator
