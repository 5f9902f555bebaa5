// The actor registry (docs/design.md §1, §5): which actors exist, in which pool, whether they are
// alive, and which job each one runs. Plain C++ (no gRPC), so scheduling is tested without a
// server.
//
// An actor's life here:  Register -> free --Reserve--> assigned --Free(job)--> free
//                        any state --no heartbeat for heartbeat_timeout (Expire)--> removed
//                        any state --unreachable from a job's runner (Remove)--> removed
// A removed actor's next heartbeat is NotFound and it registers again under a new id. Registering
// an address again replaces the earlier entry (the actor restarted).
//
// Thread-safe. The clock is injected so tests advance it by hand.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace tandem::coordinator {

using Clock = std::chrono::steady_clock;

struct ActorEntry {
  std::string id;  // "<pool>-<n>"
  std::string pool;
  std::string device;
  std::string address;
  std::string job_id;  // "" when free
  int64_t step = 0;    // from the last heartbeat
  std::string phase = "idle";
  int64_t last_collective = 0;
  Clock::time_point last_heartbeat;
  std::string unhealthy;     // from the last heartbeat: why it cannot take work; "" when it can
  int64_t memory_bytes = 0;  // what it offers a job (RegisterActorRequest.memory_bytes); 0: unknown
};

// What a job asks for: `count` actors of `pool`, in the order of the job's groups.
struct GroupNeed {
  std::string pool;
  int count = 0;
};

class Registry {
 public:
  explicit Registry(
      std::chrono::milliseconds heartbeat_timeout,
      std::function<Clock::time_point()> now = [] { return Clock::now(); });

  // Returns the new actor's id. InvalidArgument for an empty pool or address, or negative memory.
  absl::StatusOr<std::string> Register(const std::string& pool, const std::string& device,
                                       const std::string& address, int64_t memory_bytes = 0);
  // Records that the actor lives. Its progress (step, phase, last collective) counts only for the
  // job it is reserved for: a report about any other job is ignored. NotFound for an unknown id.
  // `unhealthy` (why it cannot take work, "" when it can) holds until the next heartbeat; Reserve
  // passes over an unhealthy actor.
  absl::Status Heartbeat(const std::string& id, const std::string& job_id, int64_t step,
                         const std::string& phase, int64_t last_collective,
                         const std::string& unhealthy = "");
  // Every registered actor, in registration order.
  std::vector<ActorEntry> List() const;
  // Removes actors whose last heartbeat is older than the timeout; returns them.
  std::vector<ActorEntry> Expire();
  // Gang reservation: all of `needs` at once from free actors, oldest first, or nothing.
  // ResourceExhausted when a pool has fewer actors registered than the job needs in all ("pool
  // 'llm' has 2 actors registered and the job needs 4"); FailedPrecondition saying what is missing
  // ("waiting for 2 actors of pool 'vision' (1 free of 2 registered)") when they exist but are
  // busy.
  absl::StatusOr<std::vector<std::vector<ActorEntry>>> Reserve(const std::string& job_id,
                                                               const std::vector<GroupNeed>& needs);
  // Frees every actor `job_id` holds.
  void Free(const std::string& job_id);
  // Forgets an actor that cannot be reached (lost contact): it is not reserved again, and if it is
  // alive after all its next heartbeat is NotFound and it registers again. Returns whether it was
  // registered.
  bool Remove(const std::string& id);
  // A supervisor's report that the actor process at `address` ended: the actor (if registered) is
  // removed and returned, and the description is kept for AwaitExitReport.
  std::optional<ActorEntry> ReportExit(const std::string& address, const std::string& description);
  // The description reported for `address` at or after `since`, waiting up to `timeout` for it.
  std::optional<std::string> AwaitExitReport(const std::string& address, Clock::time_point since,
                                             std::chrono::milliseconds timeout);
  std::chrono::milliseconds heartbeat_timeout() const { return heartbeat_timeout_; }
  Clock::time_point now() const { return now_(); }

 private:
  const std::chrono::milliseconds heartbeat_timeout_;
  const std::function<Clock::time_point()> now_;
  mutable std::mutex mu_;
  std::vector<ActorEntry> actors_;              // registration order
  std::map<std::string, int64_t> next_number_;  // per pool
  struct ExitReport {
    Clock::time_point time;
    std::string description;
  };
  std::map<std::string, ExitReport> exits_;  // by address, the latest
  std::condition_variable exit_reported_;
};

}  // namespace tandem::coordinator
