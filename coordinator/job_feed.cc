#include "coordinator/job_feed.h"

#include <algorithm>

namespace tandem::coordinator {

void JobFeeds::Publish(const std::string& job_id, v1::JobUpdate update) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    Feed& feed = feeds_[job_id];
    feed.updates.push_back(std::move(update));
    if (feed.updates.size() > kTail) {
      feed.updates.pop_front();
      ++feed.first;
    }
  }
  changed_.notify_all();
}

void JobFeeds::Close(const std::string& job_id) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    Feed& feed = feeds_[job_id];
    if (!feed.closed) {
      feed.closed = true;
      closed_.push_back(job_id);
      if (closed_.size() > kClosedFeeds) {
        feeds_.erase(closed_.front());
        closed_.pop_front();
      }
    }
  }
  changed_.notify_all();
}

size_t JobFeeds::Size(const std::string& job_id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = feeds_.find(job_id);
  return it == feeds_.end() ? 0 : it->second.first + it->second.updates.size();
}

std::vector<v1::JobUpdate> JobFeeds::Read(const std::string& job_id, size_t* next,
                                          std::chrono::milliseconds wait, bool* closed) {
  const size_t from = *next;
  std::unique_lock<std::mutex> lock(mu_);
  // A feed is created by its job's first update; one not here either has not begun or is gone.
  changed_.wait_for(lock, wait, [&] {
    const auto it = feeds_.find(job_id);
    return it != feeds_.end() &&
           (it->second.first + it->second.updates.size() > from || it->second.closed);
  });
  std::vector<v1::JobUpdate> out;
  const auto it = feeds_.find(job_id);
  if (it == feeds_.end()) {
    *closed = false;
    return out;
  }
  const Feed& feed = it->second;
  for (size_t i = std::max(from, feed.first) - feed.first; i < feed.updates.size(); ++i)
    out.push_back(feed.updates[i]);
  *next = std::max(from, feed.first + feed.updates.size());
  *closed = feed.closed;
  return out;
}

size_t JobFeeds::feeds() {
  std::lock_guard<std::mutex> lock(mu_);
  return feeds_.size();
}

size_t JobFeeds::updates() {
  std::lock_guard<std::mutex> lock(mu_);
  size_t total = 0;
  for (const auto& [id, feed] : feeds_) total += feed.updates.size();
  return total;
}

}  // namespace tandem::coordinator
