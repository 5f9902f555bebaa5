// Plans micro-batches and reads their images on a thread of its own, ahead of the step that needs
// them, as a PyTorch DataLoader's worker does, so that planning (with sequence packing, counting
// each sample's text tokens), rendering and decoding overlap the device's work.
//
//   ImagePrefetcher prefetcher(plan, read, /*depth=*/2);
//   for (batch of the step) prefetcher.Request(batch);   // also the next step's, once known
//   ...
//   ASSIGN_OR_RETURN(MicroBatchPlan plan, prefetcher.PlanOf(batch));  // its plan alone, early
//   ASSIGN_OR_RETURN(PrefetchedBatch read, prefetcher.Take(batch));   // its plan and images
//
// Requests are planned in the order they were made, every one as soon as the thread is free (a
// plan is small), and read in that order, at most `depth` of them finished and not yet taken (the
// memory held ahead: depth micro-batches of images). PlanOf waits for a batch's plan alone; Take
// returns the requested batch's images once read, or plans and reads a batch nobody requested on
// the caller's thread; requests made before the one taken are dropped (a step that failed, or a
// sampler that moved: a resume). Planning and reading are pure functions of the indices
// (data::Dataset is immutable), so a batch is the same whichever thread reads it, and an error is
// returned by the PlanOf or Take of its batch.
//
// Thread-safety: Request, PlanOf and Take from one thread (the stage's); `plan` and `read` run on
// the prefetcher's thread and, for batches nobody requested, on the caller's. The destructor waits
// for the work in progress.
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
  // A micro-batch's plan (and, reading under "skip", the samples its table or headers leave out),
  // with no images yet.
  using PlanFn =
      std::function<absl::StatusOr<PrefetchedBatch>(const std::vector<int64_t>& indices)>;
  // Reads the images of the micro-batch `read` planned (a PlanFn's result) into it.
  using ReadFn =
      std::function<absl::Status(const std::vector<int64_t>& indices, PrefetchedBatch& read)>;

  // REQUIRES: depth >= 1.
  ImagePrefetcher(PlanFn plan, ReadFn read, size_t depth);
  ~ImagePrefetcher();
  ImagePrefetcher(const ImagePrefetcher&) = delete;
  ImagePrefetcher& operator=(const ImagePrefetcher&) = delete;

  // Queues a read of `indices`, unless it is queued already.
  void Request(const std::vector<int64_t>& indices);
  // The plan of `indices` (requested now if it was not), once the thread made it.
  absl::StatusOr<MicroBatchPlan> PlanOf(const std::vector<int64_t>& indices);
  // The images of `indices`: a queued read's result (waiting for it), or a read on this thread.
  absl::StatusOr<PrefetchedBatch> Take(const std::vector<int64_t>& indices);

  // Plans and reads this prefetcher's thread has done (for tests).
  int64_t plans() const;
  int64_t reads() const;

 private:
  struct Entry {
    std::vector<int64_t> indices;
    bool planning = false;
    bool planned = false;  // `result` holds the plan, or an error (then done too)
    bool reading = false;
    bool done = false;
    absl::StatusOr<PrefetchedBatch> result;
  };

  void Run();
  // Requests `indices`; REQUIRES: mutex_ held.
  std::shared_ptr<Entry> RequestLocked(const std::vector<int64_t>& indices);
  absl::StatusOr<PrefetchedBatch> Plan(const std::vector<int64_t>& indices) const;
  absl::Status Read(const std::vector<int64_t>& indices, PrefetchedBatch& read) const;

  const PlanFn plan_;
  const ReadFn read_;
  const size_t depth_;
  mutable std::mutex mutex_;
  std::condition_variable changed_;
  std::deque<std::shared_ptr<Entry>> queue_;  // guarded by mutex_, in request order
  bool stop_ = false;                         // guarded by mutex_
  int64_t plans_ = 0;                         // guarded by mutex_
  int64_t reads_ = 0;                         // guarded by mutex_
  std::thread thread_;                        // last: starts once the rest is ready
};

}  // namespace tandem::step
