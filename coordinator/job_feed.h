// Per-job streams of tandem.v1.JobUpdate for WatchJob: the step driver publishes events, metrics
// and state changes; any number of watchers read them from any position, waiting for more with a
// deadline.
//
// Bounded: a feed keeps its last kTail updates (a watcher that falls further behind continues from
// the oldest kept; the events are in the job store for good), and the feeds of the last
// kClosedFeeds jobs that ended; older ones are dropped. So a coordinator that runs for months holds
// a few MB of feeds, not every step it has ever run. Thread-safe.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "proto/tandem/v1/coordinator.pb.h"

namespace tandem::coordinator {

class JobFeeds {
 public:
  static constexpr size_t kTail = 4096;
  static constexpr size_t kClosedFeeds = 64;

  void Publish(const std::string& job_id, v1::JobUpdate update);
  // Marks the feed complete (after the job's final state): readers stop after its last update.
  void Close(const std::string& job_id);
  // Updates published so far (the index after the last one), dropped ones included.
  size_t Size(const std::string& job_id);
  // Updates from index *next on (from the oldest kept when *next was dropped), waiting up to `wait`
  // for at least one when there are none yet; *next becomes the index after the last returned.
  // `*closed` is set when the feed is complete and everything was read. A feed not held (its job
  // has not published yet, or ended long ago) reads as empty and open: ask the job store whether
  // the job has ended.
  std::vector<v1::JobUpdate> Read(const std::string& job_id, size_t* next,
                                  std::chrono::milliseconds wait, bool* closed);

  // Feeds held, and updates held in all of them: what the bounds bound.
  size_t feeds();
  size_t updates();

 private:
  struct Feed {
    std::deque<v1::JobUpdate> updates;
    size_t first = 0;  // the index of updates.front()
    bool closed = false;
  };
  std::mutex mu_;
  std::condition_variable changed_;
  std::map<std::string, Feed> feeds_;
  std::deque<std::string> closed_;  // ids of the closed feeds kept, oldest first
};

}  // namespace tandem::coordinator
