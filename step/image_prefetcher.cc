#include "step/image_prefetcher.h"

#include <algorithm>
#include <exception>
#include <utility>

#include "absl/strings/str_cat.h"

namespace tandem::step {

ImagePrefetcher::ImagePrefetcher(ReadFn read, size_t depth)
    : read_(std::move(read)), depth_(std::max<size_t>(depth, 1)), thread_([this] { Run(); }) {}

ImagePrefetcher::~ImagePrefetcher() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  changed_.notify_all();
  thread_.join();
}

void ImagePrefetcher::Request(const std::vector<int64_t>& indices) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    for (const auto& entry : queue_) {
      if (entry->indices == indices) return;
    }
    auto entry = std::make_shared<Entry>();
    entry->indices = indices;
    queue_.push_back(std::move(entry));
  }
  changed_.notify_all();
}

absl::StatusOr<PrefetchedBatch> ImagePrefetcher::Take(const std::vector<int64_t>& indices) {
  std::unique_lock<std::mutex> lock(mutex_);
  auto match = std::find_if(queue_.begin(), queue_.end(),
                            [&](const auto& entry) { return entry->indices == indices; });
  if (match == queue_.end()) {
    lock.unlock();
    return Read(indices);
  }
  // Requests before this one will not be taken; one being read finishes into its own Entry.
  queue_.erase(queue_.begin(), match);
  changed_.notify_all();  // finished reads dropped: room for this one
  std::shared_ptr<Entry> entry = queue_.front();
  changed_.wait(lock, [&] { return entry->done; });
  queue_.pop_front();
  lock.unlock();
  changed_.notify_all();  // room for the next read
  return std::move(entry->result);
}

int64_t ImagePrefetcher::reads() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return reads_;
}

void ImagePrefetcher::Run() {
  std::unique_lock<std::mutex> lock(mutex_);
  while (true) {
    std::shared_ptr<Entry> next;
    changed_.wait(lock, [&] {
      next = nullptr;
      if (stop_) return true;
      size_t finished = 0;
      for (const auto& entry : queue_) {
        if (entry->done) {
          ++finished;
        } else if (!entry->started) {
          next = entry;
          break;
        }
      }
      return next != nullptr && finished < depth_;
    });
    if (stop_) return;
    next->started = true;
    lock.unlock();
    absl::StatusOr<PrefetchedBatch> result = Read(next->indices);
    lock.lock();
    next->result = std::move(result);
    next->done = true;
    ++reads_;
    changed_.notify_all();
  }
}

absl::StatusOr<PrefetchedBatch> ImagePrefetcher::Read(const std::vector<int64_t>& indices) const {
  try {
    return read_(indices);
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("reading images: ", e.what()));
  }
}

}  // namespace tandem::step
