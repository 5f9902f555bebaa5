#include "coordinator/memory_store.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace tandem::coordinator {

namespace {

absl::Status CheckKey(const std::string& key) {
  if (key.empty()) return absl::InvalidArgumentError("rendezvous store: empty key");
  if (key.size() > MemoryStore::kMaxKeyBytes) {
    return absl::InvalidArgumentError(absl::StrCat("rendezvous store: a key of ", key.size(),
                                                   " bytes; keys are at most ",
                                                   MemoryStore::kMaxKeyBytes));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status MemoryStore::Put(const std::string& key, std::string value) {
  if (value.size() > kMaxValueBytes) {
    return absl::InvalidArgumentError(absl::StrCat("rendezvous store: key ", key, ": a value of ",
                                                   value.size(), " bytes; values are at most ",
                                                   kMaxValueBytes));
  }
  auto it = values_.find(key);
  const size_t old = it == values_.end() ? 0 : key.size() + it->second.size();
  if (bytes_ - old + key.size() + value.size() > limits_.max_bytes) {
    return absl::ResourceExhaustedError(absl::StrCat("rendezvous store: key ", key,
                                                     ": the store holds ", bytes_,
                                                     " bytes, and at most ", limits_.max_bytes));
  }
  bytes_ = bytes_ - old + key.size() + value.size();
  values_[key] = std::move(value);
  return absl::OkStatus();
}

absl::Status MemoryStore::Set(const std::string& key, const std::string& value) {
  RETURN_IF_ERROR(CheckKey(key));
  {
    std::lock_guard<std::mutex> lock(mu_);
    RETURN_IF_ERROR(Put(key, value));
  }
  changed_.notify_all();
  return absl::OkStatus();
}

absl::StatusOr<std::string> MemoryStore::Get(const std::string& key,
                                             std::chrono::milliseconds timeout) {
  RETURN_IF_ERROR(CheckKey(key));
  if (timeout > limits_.max_wait) {
    return absl::InvalidArgumentError(absl::StrCat("rendezvous store: key ", key, ": a wait of ",
                                                   timeout.count(), " ms; a Get waits at most ",
                                                   limits_.max_wait.count(), " ms"));
  }
  std::unique_lock<std::mutex> lock(mu_);
  if (auto it = values_.find(key); it != values_.end()) return it->second;
  if (waiters_ >= limits_.max_waiters) {
    return absl::ResourceExhaustedError(
        absl::StrCat("rendezvous store: key ", key, ": ", waiters_,
                     " Gets are waiting already, the most there may be"));
  }
  ++waiters_;
  const bool set = changed_.wait_for(lock, timeout, [&] { return values_.count(key) > 0; });
  --waiters_;
  if (!set) {
    return absl::DeadlineExceededError(absl::StrCat(
        "rendezvous store: key ", key, " was not set within ", timeout.count(), " ms"));
  }
  return values_[key];
}

int MemoryStore::waiters() {
  std::lock_guard<std::mutex> lock(mu_);
  return waiters_;
}

absl::StatusOr<int64_t> MemoryStore::Add(const std::string& key, int64_t delta) {
  RETURN_IF_ERROR(CheckKey(key));
  int64_t value = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = values_.find(key);
    if (it != values_.end() && !absl::SimpleAtoi(it->second, &value)) {
      return absl::InvalidArgumentError(
          absl::StrCat("rendezvous store: key ", key, " does not hold an integer"));
    }
    if (__builtin_add_overflow(value, delta, &value)) {
      return absl::OutOfRangeError(absl::StrCat("rendezvous store: key ", key, ": adding ", delta,
                                                " overflows a 64-bit integer"));
    }
    RETURN_IF_ERROR(Put(key, std::to_string(value)));
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
  auto it = values_.find(key);
  if (it == values_.end())
    return absl::NotFoundError(absl::StrCat("rendezvous store: no key ", key));
  bytes_ -= key.size() + it->second.size();
  values_.erase(it);
  return absl::OkStatus();
}

void MemoryStore::DeleteWithPrefix(const std::string& prefix) {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto it = values_.lower_bound(prefix);
       it != values_.end() && it->first.rfind(prefix, 0) == 0;) {
    bytes_ -= it->first.size() + it->second.size();
    it = values_.erase(it);
  }
}

}  // namespace tandem::coordinator
