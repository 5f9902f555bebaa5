// The coordinator's rendezvous store: a KeyValueStore in memory, served over gRPC (Store* rpcs).
// Keys are scoped per job attempt by the callers ("job-000001/1/vision/..."), so a restarted job
// never reads a stale key; DeleteWithPrefix drops a finished attempt's keys. Thread-safe.
//
// Every caller holds the cluster's token, but a buggy or hostile one must not take the coordinator
// down: keys, values and the whole store are bounded in bytes, a Get waits at most max_wait (the
// coordinator's --command-timeout, which bounds every collective's rendezvous anyway), and at
// most max_waiters Gets wait at once (each holds a server thread), so that heartbeats always find
// one. The coordinator's service also refuses keys outside a running job (coordinator_service.cc).
#pragma once

#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>
#include <string>

#include "common/kv_store.h"

namespace tandem::coordinator {

class MemoryStore : public KeyValueStore {
 public:
  static constexpr size_t kMaxKeyBytes = 1024;
  static constexpr size_t kMaxValueBytes = 1 << 20;  // rendezvous values are addresses and ids

  struct Limits {
    std::chrono::milliseconds max_wait = std::chrono::minutes(10);
    size_t max_bytes = 256 << 20;  // keys and values together
    int max_waiters = 256;
  };
  MemoryStore() : MemoryStore(Limits{}) {}
  explicit MemoryStore(const Limits& limits) : limits_(limits) {}

  absl::Status Set(const std::string& key, const std::string& value) override;
  absl::StatusOr<std::string> Get(const std::string& key,
                                  std::chrono::milliseconds timeout) override;
  absl::StatusOr<int64_t> Add(const std::string& key, int64_t delta) override;
  absl::StatusOr<bool> Check(const std::string& key) override;
  absl::Status Delete(const std::string& key) override;
  void DeleteWithPrefix(const std::string& prefix);
  int waiters();  // Gets waiting now

 private:
  const Limits limits_;
  std::mutex mu_;
  std::condition_variable changed_;
  std::map<std::string, std::string> values_;  // guarded by mu_
  size_t bytes_ = 0;                           // of values_' keys and values; guarded by mu_
  int waiters_ = 0;                            // Gets waiting; guarded by mu_

  // Stores `value` under `key` within the bounds. REQUIRES: mu_ held.
  absl::Status Put(const std::string& key, std::string value);
};

}  // namespace tandem::coordinator
