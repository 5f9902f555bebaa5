// A fixed set of threads that share loops of independent tasks: how a vision rank decodes a
// micro-batch's images (data.workers), as a PyTorch DataLoader's workers decode its samples, but
// as threads of one process, so decoded pixels are not copied between processes.
//
//   WorkerPool pool(4);                       // the caller and 3 threads
//   pool.ForEach(images.size(), [&](int64_t i) { decoded[i] = Decode(images[i]); });
//
// ForEach hands out tasks 0, 1, ... in order to whichever thread is free, the calling thread
// included, and returns when all have finished, so a task's results are ready in its own slot and
// their order never depends on the threads. A pool of 1 runs every task on the caller.
//
// Thread-safety: ForEach from one thread at a time (a second caller waits for the first); tasks
// run concurrently and must not share mutable state without their own locks. The destructor
// waits for the threads, which are idle once no ForEach runs.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace tandem::data {

class WorkerPool {
 public:
  // REQUIRES: threads >= 1 (the caller counts as one).
  explicit WorkerPool(int threads);
  ~WorkerPool();
  WorkerPool(const WorkerPool&) = delete;
  WorkerPool& operator=(const WorkerPool&) = delete;

  int threads() const { return static_cast<int>(threads_.size()) + 1; }

  // Runs task(0), ..., task(count - 1) across the pool; returns when all have returned.
  // REQUIRES: `task` does not throw.
  void ForEach(int64_t count, const std::function<void(int64_t)>& task);

 private:
  void Work();
  // Runs tasks of the current loop until none is left to start; `lock` is held between them.
  void Drain(std::unique_lock<std::mutex>& lock);

  std::mutex caller_;  // one ForEach at a time
  std::mutex mutex_;
  std::condition_variable changed_;
  const std::function<void(int64_t)>* task_ = nullptr;  // guarded by mutex_: the current loop
  int64_t count_ = 0;                                   // guarded by mutex_
  int64_t next_ = 0;                                    // guarded by mutex_: the next to start
  int64_t running_ = 0;                                 // guarded by mutex_
  bool stop_ = false;                                   // guarded by mutex_
  std::vector<std::thread> threads_;                    // last: start once the rest is ready
};

}  // namespace tandem::data
