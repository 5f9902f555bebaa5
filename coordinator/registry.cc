#include "coordinator/registry.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "jobspec/job_spec.h"

namespace tandem::coordinator {
namespace {

constexpr size_t kMaxAddressLength = 255;  // a DNS name and a port

}  // namespace

Registry::Registry(std::chrono::milliseconds heartbeat_timeout,
                   std::function<Clock::time_point()> now)
    : heartbeat_timeout_(heartbeat_timeout), now_(std::move(now)) {}

absl::StatusOr<std::string> Registry::Register(const std::string& pool, const std::string& device,
                                               const std::string& address, int64_t memory_bytes) {
  if (absl::Status bad = jobspec::CheckPoolName(pool); !bad.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("RegisterActor: pool ", bad.message()));
  }
  if (address.size() > kMaxAddressLength || device.size() > kMaxAddressLength) {
    return absl::InvalidArgumentError(absl::StrCat(
        "RegisterActor: an address or device of more than ", kMaxAddressLength, " characters"));
  }
  if (address.empty()) return absl::InvalidArgumentError("RegisterActor: address is empty");
  if (memory_bytes < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("RegisterActor: memory_bytes must be >= 0, got ", memory_bytes));
  }
  std::lock_guard<std::mutex> lock(mu_);
  actors_.erase(std::remove_if(actors_.begin(), actors_.end(),
                               [&](const ActorEntry& a) { return a.address == address; }),
                actors_.end());
  ActorEntry entry;
  entry.id = absl::StrCat(pool, "-", next_number_[pool]++);
  entry.pool = pool;
  entry.device = device.empty() ? "cpu" : device;
  entry.address = address;
  entry.memory_bytes = memory_bytes;
  entry.last_heartbeat = now_();
  actors_.push_back(entry);
  return entry.id;
}

absl::Status Registry::Heartbeat(const std::string& id, const std::string& job_id, int64_t step,
                                 const std::string& phase, int64_t last_collective,
                                 const std::string& unhealthy) {
  std::lock_guard<std::mutex> lock(mu_);
  for (ActorEntry& a : actors_) {
    if (a.id != id) continue;
    a.last_heartbeat = now_();
    a.unhealthy = unhealthy;
    if (job_id != a.job_id) return absl::OkStatus();  // finishing a released job, or not its own
    a.step = step;
    a.phase = phase;
    a.last_collective = last_collective;
    return absl::OkStatus();
  }
  return absl::NotFoundError(absl::StrCat("no actor ", id, " is registered; register again"));
}

std::vector<ActorEntry> Registry::List() const {
  std::lock_guard<std::mutex> lock(mu_);
  return actors_;
}

std::vector<ActorEntry> Registry::Expire() {
  std::lock_guard<std::mutex> lock(mu_);
  const Clock::time_point limit = now_() - heartbeat_timeout_;
  std::vector<ActorEntry> dead;
  for (auto it = actors_.begin(); it != actors_.end();) {
    if (it->last_heartbeat < limit) {
      dead.push_back(*it);
      it = actors_.erase(it);
    } else {
      ++it;
    }
  }
  return dead;
}

absl::StatusOr<std::vector<std::vector<ActorEntry>>> Registry::Reserve(
    const std::string& job_id, const std::vector<GroupNeed>& needs) {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<std::vector<ActorEntry*>> picked(needs.size());
  std::vector<std::string> missing;
  std::vector<std::string> too_small;  // pools with fewer actors registered than the job needs
  std::map<std::string, int> taken;    // per pool, across groups that share a pool
  for (size_t g = 0; g < needs.size(); ++g) {
    for (ActorEntry& a : actors_) {
      if (static_cast<int>(picked[g].size()) == needs[g].count) break;
      if (a.pool != needs[g].pool || !a.job_id.empty() || !a.unhealthy.empty()) continue;
      bool used = false;
      for (const auto& group : picked)
        used = used || std::find(group.begin(), group.end(), &a) != group.end();
      if (!used) picked[g].push_back(&a);
    }
    if (static_cast<int>(picked[g].size()) < needs[g].count) {
      int registered = 0, free = 0, unhealthy = 0;
      for (const ActorEntry& a : actors_) {
        if (a.pool != needs[g].pool) continue;
        ++registered;
        free += a.job_id.empty() && a.unhealthy.empty() ? 1 : 0;
        unhealthy += a.unhealthy.empty() ? 0 : 1;
      }
      missing.push_back(absl::StrCat(
          needs[g].count, " actors of pool '", needs[g].pool, "' (", free, " free of ", registered,
          " registered", unhealthy > 0 ? absl::StrCat(", ", unhealthy, " unhealthy") : "",
          taken[needs[g].pool] > 0 ? ", shared with another group" : "", ")"));
    }
    taken[needs[g].pool] += needs[g].count;
  }
  for (const auto& need : taken) {  // a pair, not a structured binding: the lambda captures it
    const std::string& pool = need.first;
    const auto registered = std::count_if(actors_.begin(), actors_.end(),
                                          [&](const ActorEntry& a) { return a.pool == pool; });
    if (registered < need.second) {
      too_small.push_back(absl::StrCat("pool '", pool, "' has ", registered,
                                       " actors registered and the job needs ", need.second));
    }
  }
  if (!too_small.empty()) return absl::ResourceExhaustedError(absl::StrJoin(too_small, "; "));
  if (!missing.empty()) {
    std::string text = "waiting for ";
    for (size_t i = 0; i < missing.size(); ++i) text += (i ? " and " : "") + missing[i];
    return absl::FailedPreconditionError(text);
  }
  std::vector<std::vector<ActorEntry>> out(needs.size());
  for (size_t g = 0; g < needs.size(); ++g) {
    for (ActorEntry* a : picked[g]) {
      a->job_id = job_id;
      out[g].push_back(*a);
    }
  }
  return out;
}

void Registry::Free(const std::string& job_id) {
  std::lock_guard<std::mutex> lock(mu_);
  for (ActorEntry& a : actors_) {
    if (a.job_id == job_id) {
      a.job_id.clear();
      a.phase = "idle";
    }
  }
}

bool Registry::Remove(const std::string& id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it =
      std::find_if(actors_.begin(), actors_.end(), [&](const ActorEntry& a) { return a.id == id; });
  if (it == actors_.end()) return false;
  actors_.erase(it);
  return true;
}

std::optional<ActorEntry> Registry::ReportExit(const std::string& address,
                                               const std::string& description) {
  std::optional<ActorEntry> removed;
  {
    std::lock_guard<std::mutex> lock(mu_);
    exits_[address] = {now_(), description};
    auto it = std::find_if(actors_.begin(), actors_.end(),
                           [&](const ActorEntry& a) { return a.address == address; });
    if (it != actors_.end()) {
      removed = *it;
      actors_.erase(it);
    }
  }
  exit_reported_.notify_all();
  return removed;
}

std::optional<std::string> Registry::AwaitExitReport(const std::string& address,
                                                     Clock::time_point since,
                                                     std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  std::optional<std::string> found;
  exit_reported_.wait_for(lock, timeout, [&] {
    auto it = exits_.find(address);
    if (it != exits_.end() && it->second.time >= since) found = it->second.description;
    return found.has_value();
  });
  return found;
}

}  // namespace tandem::coordinator
