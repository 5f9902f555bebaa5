#include "coordinator/job_feed.h"

namespace tandem::coordinator {

void JobFeeds::Publish(const std::string& job_id, v1::JobUpdate update) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    feeds_[job_id].updates.push_back(std::move(update));
  }
  changed_.notify_all();
}

void JobFeeds::Close(const std::string& job_id) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    feeds_[job_id].closed = true;
  }
  changed_.notify_all();
}

size_t JobFeeds::Size(const std::string& job_id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = feeds_.find(job_id);
  return it == feeds_.end() ? 0 : it->second.updates.size();
}

std::vector<v1::JobUpdate> JobFeeds::Read(const std::string& job_id, size_t from, std::chrono::milliseconds wait,
                                          bool* closed) {
  std::unique_lock<std::mutex> lock(mu_);
  changed_.wait_for(lock, wait, [&] {
    const Feed& feed = feeds_[job_id];
    return feed.updates.size() > from || feed.closed;
  });
  const Feed& feed = feeds_[job_id];
  std::vector<v1::JobUpdate> out;
  for (size_t i = from; i < feed.updates.size(); ++i) out.push_back(feed.updates[i]);
  *closed = feed.closed;
  return out;
}

}  // namespace tandem::coordinator
