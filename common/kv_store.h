// A small key-value store that a group's ranks rendezvous through (Gloo device addresses, NCCL
// unique ids). FileStore serves one machine now; the coordinator serves the same interface over
// gRPC later, so this header must stay free of LibTorch and gRPC.
//
// Thread-safe. Keys are arbitrary non-empty strings; values are bytes.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace tandem {

class KeyValueStore {
 public:
  virtual ~KeyValueStore() = default;

  // Sets key to value, replacing any earlier value. Visible to Get on every rank once it returns.
  virtual absl::Status Set(const std::string& key, const std::string& value) = 0;

  // Returns the value of key, waiting up to `timeout` for it to be set. DeadlineExceeded names the
  // key and the store when it does not appear in time.
  virtual absl::StatusOr<std::string> Get(const std::string& key,
                                          std::chrono::milliseconds timeout) = 0;

  // Atomically adds delta to the integer stored at key (absent counts as 0) and returns the new
  // value.
  virtual absl::StatusOr<int64_t> Add(const std::string& key, int64_t delta) = 0;

  // True when key is set now; never waits.
  virtual absl::StatusOr<bool> Check(const std::string& key) = 0;

  // Removes key; NotFound when absent.
  virtual absl::Status Delete(const std::string& key) = 0;
};

// A store in a directory shared by the ranks (one machine, or a shared filesystem). Each key is a
// file written atomically (temp name, rename); Add serialises through an flock'ed counter file. The
// directory is created if missing. Use a fresh directory per group: stale keys would be read as
// set.
absl::StatusOr<std::shared_ptr<KeyValueStore>> OpenFileStore(const std::string& directory);

}  // namespace tandem
