#include "step/image_prefetcher.h"

#include <algorithm>
#include <exception>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace tandem::step {

ImagePrefetcher::ImagePrefetcher(PlanFn plan, ReadFn read, size_t depth)
    : plan_(std::move(plan)),
      read_(std::move(read)),
      depth_(std::max<size_t>(depth, 1)),
      thread_([this] { Run(); }) {}

ImagePrefetcher::~ImagePrefetcher() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  changed_.notify_all();
  thread_.join();
}

std::shared_ptr<ImagePrefetcher::Entry> ImagePrefetcher::RequestLocked(
    const std::vector<int64_t>& indices) {
  for (const auto& entry : queue_) {
    if (entry->indices == indices) return entry;
  }
  auto entry = std::make_shared<Entry>();
  entry->indices = indices;
  queue_.push_back(entry);
  return entry;
}

void ImagePrefetcher::Request(const std::vector<int64_t>& indices) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    RequestLocked(indices);
  }
  changed_.notify_all();
}

absl::StatusOr<MicroBatchPlan> ImagePrefetcher::PlanOf(const std::vector<int64_t>& indices) {
  std::unique_lock<std::mutex> lock(mutex_);
  std::shared_ptr<Entry> entry = RequestLocked(indices);
  changed_.notify_all();
  changed_.wait(lock, [&] { return entry->planned; });
  if (!entry->result.ok()) return entry->result.status();
  return entry->result->plan;  // the reader leaves the plan as it is
}

absl::StatusOr<PrefetchedBatch> ImagePrefetcher::Take(const std::vector<int64_t>& indices) {
  std::unique_lock<std::mutex> lock(mutex_);
  auto match = std::find_if(queue_.begin(), queue_.end(),
                            [&](const auto& entry) { return entry->indices == indices; });
  if (match == queue_.end()) {
    lock.unlock();
    ASSIGN_OR_RETURN(PrefetchedBatch read, Plan(indices));
    RETURN_IF_ERROR(Read(indices, read));
    return read;
  }
  // Requests before this one will not be taken; one in progress finishes into its own Entry.
  queue_.erase(queue_.begin(), match);
  changed_.notify_all();  // finished reads dropped: room for this one
  std::shared_ptr<Entry> entry = queue_.front();
  changed_.wait(lock, [&] { return entry->done; });
  queue_.pop_front();
  lock.unlock();
  changed_.notify_all();  // room for the next read
  return std::move(entry->result);
}

int64_t ImagePrefetcher::plans() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return plans_;
}

int64_t ImagePrefetcher::reads() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return reads_;
}

void ImagePrefetcher::Run() {
  std::unique_lock<std::mutex> lock(mutex_);
  while (true) {
    std::shared_ptr<Entry> next;
    bool plan = false;
    changed_.wait(lock, [&] {
      next = nullptr;
      if (stop_) return true;
      // Every request's plan first, in order: a plan holds no images.
      for (const auto& entry : queue_) {
        if (!entry->planned && !entry->planning) {
          next = entry;
          plan = true;
          return true;
        }
      }
      size_t finished = 0;
      for (const auto& entry : queue_) {
        if (entry->done) {
          ++finished;
        } else if (!next && entry->planned && !entry->reading) {
          next = entry;
        }
      }
      return next != nullptr && finished < depth_;
    });
    if (stop_) return;
    if (plan) {
      next->planning = true;
      lock.unlock();
      absl::StatusOr<PrefetchedBatch> planned = Plan(next->indices);
      lock.lock();
      next->result = std::move(planned);
      next->planned = true;
      next->done = !next->result.ok();
      ++plans_;
    } else {
      next->reading = true;
      // Only this thread writes the entry's result until it is done.
      PrefetchedBatch& read = *next->result;
      lock.unlock();
      absl::Status status = Read(next->indices, read);
      lock.lock();
      if (!status.ok()) next->result = std::move(status);
      next->done = true;
      ++reads_;
    }
    changed_.notify_all();
  }
}

absl::StatusOr<PrefetchedBatch> ImagePrefetcher::Plan(const std::vector<int64_t>& indices) const {
  try {
    return plan_(indices);
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("planning a micro-batch: ", e.what()));
  }
}

absl::Status ImagePrefetcher::Read(const std::vector<int64_t>& indices,
                                   PrefetchedBatch& read) const {
  try {
    return read_(indices, read);
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("reading images: ", e.what()));
  }
}

}  // namespace tandem::step
