#include "coordinator/memory_store.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace tandem::coordinator {

absl::Status MemoryStore::Set(const std::string& key, const std::string& value) {
  if (key.empty()) return absl::InvalidArgumentError("rendezvous store: empty key");
  {
    std::lock_guard<std::mutex> lock(mu_);
    values_[key] = value;
  }
  changed_.notify_all();
  return absl::OkStatus();
}

absl::StatusOr<std::string> MemoryStore::Get(const std::string& key, std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  if (!changed_.wait_for(lock, timeout, [&] { return values_.count(key) > 0; })) {
    return absl::DeadlineExceededError(
        absl::StrCat("rendezvous store: key ", key, " was not set within ", timeout.count(), " ms"));
  }
  return values_[key];
}

absl::StatusOr<int64_t> MemoryStore::Add(const std::string& key, int64_t delta) {
  int64_t value = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = values_.find(key);
    if (it != values_.end() && !absl::SimpleAtoi(it->second, &value)) {
      return absl::InvalidArgumentError(absl::StrCat("rendezvous store: key ", key, " does not hold an integer"));
    }
    if (__builtin_add_overflow(value, delta, &value)) {
      return absl::OutOfRangeError(absl::StrCat("rendezvous store: key ", key, ": adding ", delta,
                                                " overflows a 64-bit integer"));
    }
    values_[key] = std::to_string(value);
  }
  changed_.notify_all();
  return value;
}

absl::StatusOr<bool> MemoryStore::Check(const std::string& key) {
  std::lock_guard<std::mutex> lock(mu_);
  return values_.count(key) > 0;
}

absl::Status MemoryStore::Delete(const std::string& key) {
  std::lock_guard<std::mutex> lock(mu_);
  if (values_.erase(key) == 0) return absl::NotFoundError(absl::StrCat("rendezvous store: no key ", key));
  return absl::OkStatus();
}

void MemoryStore::DeleteWithPrefix(const std::string& prefix) {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto it = values_.lower_bound(prefix); it != values_.end() && it->first.rfind(prefix, 0) == 0;) {
    it = values_.erase(it);
  }
}

}  // namespace tandem::coordinator
