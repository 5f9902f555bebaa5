// A KeyValueStore view that puts a fixed prefix before every key, so several groups and job
// attempts share one store (the coordinator's) without seeing each other's keys. Thread-safe as its
// base.
#pragma once

#include <memory>
#include <string>
#include <utility>

#include "common/kv_store.h"

namespace tandem {

class PrefixStore : public KeyValueStore {
 public:
  PrefixStore(std::shared_ptr<KeyValueStore> base, std::string prefix)
      : base_(std::move(base)), prefix_(std::move(prefix)) {}

  absl::Status Set(const std::string& key, const std::string& value) override {
    return base_->Set(prefix_ + key, value);
  }
  absl::StatusOr<std::string> Get(const std::string& key,
                                  std::chrono::milliseconds timeout) override {
    return base_->Get(prefix_ + key, timeout);
  }
  absl::StatusOr<int64_t> Add(const std::string& key, int64_t delta) override {
    return base_->Add(prefix_ + key, delta);
  }
  absl::StatusOr<bool> Check(const std::string& key) override {
    return base_->Check(prefix_ + key);
  }
  absl::Status Delete(const std::string& key) override { return base_->Delete(prefix_ + key); }

 private:
  std::shared_ptr<KeyValueStore> base_;
  std::string prefix_;
};

}  // namespace tandem
