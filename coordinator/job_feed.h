// Per-job streams of tandem.v1.JobUpdate for WatchJob: the step driver publishes events, metrics and
// state changes; any number of watchers read them from any position, waiting for more with a deadline.
// Kept in memory for the coordinator's lifetime (a few hundred bytes per step). Thread-safe.
#pragma once

#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "proto/tandem/v1/coordinator.pb.h"

namespace tandem::coordinator {

class JobFeeds {
 public:
  void Publish(const std::string& job_id, v1::JobUpdate update);
  // Marks the feed complete (after the job's final state): readers stop after its last update.
  void Close(const std::string& job_id);
  // Updates published so far.
  size_t Size(const std::string& job_id);
  // Updates from index `from` on, waiting up to `wait` for at least one when there are none yet.
  // `*closed` is set when the feed is complete and everything was read.
  std::vector<v1::JobUpdate> Read(const std::string& job_id, size_t from, std::chrono::milliseconds wait, bool* closed);

 private:
  struct Feed {
    std::vector<v1::JobUpdate> updates;
    bool closed = false;
  };
  std::mutex mu_;
  std::condition_variable changed_;
  std::map<std::string, Feed> feeds_;
};

}  // namespace tandem::coordinator
