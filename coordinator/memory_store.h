// The coordinator's rendezvous store: a KeyValueStore in memory, served over gRPC (Store* rpcs).
// Keys are scoped per job attempt by the callers ("job-000001/1/vision/..."), so a restarted job never
// reads a stale key; DeleteWithPrefix drops a finished attempt's keys. Thread-safe.
#pragma once

#include <condition_variable>
#include <map>
#include <mutex>
#include <string>

#include "common/kv_store.h"

namespace tandem::coordinator {

class MemoryStore : public KeyValueStore {
 public:
  absl::Status Set(const std::string& key, const std::string& value) override;
  absl::StatusOr<std::string> Get(const std::string& key, std::chrono::milliseconds timeout) override;
  absl::StatusOr<int64_t> Add(const std::string& key, int64_t delta) override;
  absl::StatusOr<bool> Check(const std::string& key) override;
  absl::Status Delete(const std::string& key) override;
  void DeleteWithPrefix(const std::string& prefix);

 private:
  std::mutex mu_;
  std::condition_variable changed_;
  std::map<std::string, std::string> values_;
};

}  // namespace tandem::coordinator
