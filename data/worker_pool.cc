#include "data/worker_pool.h"

#include <algorithm>

namespace tandem::data {

WorkerPool::WorkerPool(int threads) {
  for (int i = 1; i < std::max(threads, 1); ++i) threads_.emplace_back([this] { Work(); });
}

WorkerPool::~WorkerPool() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  changed_.notify_all();
  for (std::thread& thread : threads_) thread.join();
}

void WorkerPool::Drain(std::unique_lock<std::mutex>& lock) {
  while (task_ != nullptr && next_ < count_) {
    const int64_t i = next_++;
    const std::function<void(int64_t)>& task = *task_;
    ++running_;
    lock.unlock();
    task(i);
    lock.lock();
    if (--running_ == 0 && next_ == count_) changed_.notify_all();
  }
}

void WorkerPool::ForEach(int64_t count, const std::function<void(int64_t)>& task) {
  if (count <= 0) return;
  std::lock_guard<std::mutex> one_loop(caller_);
  std::unique_lock<std::mutex> lock(mutex_);
  task_ = &task;
  count_ = count;
  next_ = 0;
  running_ = 0;
  changed_.notify_all();
  Drain(lock);
  changed_.wait(lock, [&] { return next_ == count_ && running_ == 0; });
  task_ = nullptr;
}

void WorkerPool::Work() {
  std::unique_lock<std::mutex> lock(mutex_);
  while (true) {
    changed_.wait(lock, [&] { return stop_ || (task_ != nullptr && next_ < count_); });
    if (stop_) return;
    Drain(lock);
  }
}

}  // namespace tandem::data
