// Reads micro-batches' images on a thread of its own, ahead of the step that needs them, as a
// PyTorch DataLoader's worker does, so that rendering and decoding overlap the device's work.
//
//   ImagePrefetcher prefetcher(read, /*depth=*/2);
//   for (batch of the step) prefetcher.Request(batch);   // also the next step's, once known
//   ...
//   ASSIGN_OR_RETURN(PrefetchedBatch read, prefetcher.Take(batch));  // its plan and images
//
// Requests are read in the order they were made, at most `depth` of them finished and not yet
// taken (the memory held ahead: depth micro-batches of images). Take returns the requested batch's
// images once read, or reads a batch nobody requested on the caller's thread; requests made before
// the one taken are dropped (a step that failed, or a sampler that moved: a resume). Reading is a
// pure function of the indices (data::Dataset is immutable), so a batch is the same whichever
// thread reads it, and a read's error is returned by the Take of that batch.
//
// Thread-safety: Request and Take from one thread (the stage's); `read` runs on the prefetcher's
// thread and, for batches nobody requested, on the caller's. The destructor waits for a read in
// progress.
#pragma once

#include <ATen/core/Tensor.h>

#include <algorithm>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "step/batch_plan.h"

namespace tandem::step {

// A micro-batch as read: its plan (step/batch_plan.h), made once where its images are read, and
// this rank's images of it.
struct PrefetchedBatch {
  MicroBatchPlan plan;
  at::Tensor images;
  // NOTE [Bad samples] in step/stage.h, reading under data.on_bad_sample "skip": the requested
  // samples that cannot be read (their positions among the indices, each with its error and
  // whether every rank finds it, from its table or its images' headers, or only the rank that
  // reads its images), and the indices `plan` covers, the others. When an image failed, `plan`
  // and `images` are not to be used: the batch is read again without the samples.
  struct Bad {
    int64_t position = 0;
    absl::Status error;
    bool everywhere = false;
  };
  std::vector<Bad> bad;
  std::vector<int64_t> planned;
  bool images_failed() const {
    return std::any_of(bad.begin(), bad.end(), [](const Bad& b) { return !b.everywhere; });
  }
};

class ImagePrefetcher {
 public:
  using ReadFn =
      std::function<absl::StatusOr<PrefetchedBatch>(const std::vector<int64_t>& indices)>;

  // REQUIRES: depth >= 1.
  ImagePrefetcher(ReadFn read, size_t depth);
  ~ImagePrefetcher();
  ImagePrefetcher(const ImagePrefetcher&) = delete;
  ImagePrefetcher& operator=(const ImagePrefetcher&) = delete;

  // Queues a read of `indices`, unless it is queued already.
  void Request(const std::vector<int64_t>& indices);
  // The images of `indices`: a queued read's result (waiting for it), or a read on this thread.
  absl::StatusOr<PrefetchedBatch> Take(const std::vector<int64_t>& indices);

  // Reads this prefetcher's thread has done (for tests).
  int64_t reads() const;

 private:
  struct Entry {
    std::vector<int64_t> indices;
    bool started = false;
    bool done = false;
    absl::StatusOr<PrefetchedBatch> result;
  };

  void Run();
  absl::StatusOr<PrefetchedBatch> Read(const std::vector<int64_t>& indices) const;

  const ReadFn read_;
  const size_t depth_;
  mutable std::mutex mutex_;
  std::condition_variable changed_;
  std::deque<std::shared_ptr<Entry>> queue_;  // guarded by mutex_, in request order
  bool stop_ = false;                         // guarded by mutex_
  int64_t reads_ = 0;                         // guarded by mutex_
  std::thread thread_;                        // last: starts once the rest is ready
};

}  // namespace tandem::step
