// step/image_prefetcher.h: requested batches are planned, all of them, and read, within the depth,
// on the prefetcher's thread, in order, and handed out by PlanOf and Take; anything else is read on
// the caller's thread; errors reach the PlanOf and Take of their batch.
#include "step/image_prefetcher.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"

namespace tandem::step {
namespace {

// Plans a batch (its text tokens: the indices) and reads it as one value per index, noting which
// thread read it; index 7's image fails, index 13 cannot be planned.
struct Reader {
  std::mutex mutex;
  std::vector<std::pair<int64_t, std::thread::id>> reads;  // first index, thread

  ImagePrefetcher::PlanFn Plan() {
    return [](const std::vector<int64_t>& indices) -> absl::StatusOr<PrefetchedBatch> {
      for (int64_t i : indices) {
        if (i == 13) return absl::InvalidArgumentError("sample 13 has no text");
      }
      PrefetchedBatch read;
      read.plan.text_tokens = indices;
      read.planned = indices;
      return read;
    };
  }
  ImagePrefetcher::ReadFn Read() {
    return [this](const std::vector<int64_t>& indices, PrefetchedBatch& read) -> absl::Status {
      {
        std::lock_guard<std::mutex> lock(mutex);
        reads.emplace_back(indices.at(0), std::this_thread::get_id());
      }
      for (int64_t i : indices) {
        if (i == 7) return absl::NotFoundError("sample 7 is missing");
      }
      read.images = torch::tensor(indices, at::kLong).to(at::kFloat);
      return absl::OkStatus();
    };
  }
  // The threads that read the batch starting with `first`, in order.
  std::vector<std::thread::id> threads(int64_t first) {
    std::lock_guard<std::mutex> lock(mutex);
    std::vector<std::thread::id> out;
    for (const auto& [index, thread] : reads) {
      if (index == first) out.push_back(thread);
    }
    return out;
  }
};

std::vector<float> Values(const PrefetchedBatch& read) {
  const at::Tensor& t = read.images;
  return std::vector<float>(t.data_ptr<float>(), t.data_ptr<float>() + t.numel());
}

TEST(ImagePrefetcher, ReadsRequestedBatchesOnItsThreadInRequestOrder) {
  Reader reader;
  ImagePrefetcher prefetcher(reader.Plan(), reader.Read(), 2);
  prefetcher.Request({1, 2});
  prefetcher.Request({3, 4});
  prefetcher.Request({1, 2});  // queued already
  auto first = prefetcher.Take({1, 2});
  auto second = prefetcher.Take({3, 4});
  ASSERT_TRUE(first.ok() && second.ok());
  EXPECT_EQ(Values(*first), (std::vector<float>{1, 2}));
  EXPECT_EQ(Values(*second), (std::vector<float>{3, 4}));
  EXPECT_EQ(prefetcher.reads(), 2);
  ASSERT_EQ(reader.threads(1).size(), 1u);
  EXPECT_NE(reader.threads(1)[0], std::this_thread::get_id());
  EXPECT_EQ(reader.threads(3), reader.threads(1));
}

TEST(ImagePrefetcher, ReadsAnUnrequestedBatchOnTheCallersThread) {
  Reader reader;
  ImagePrefetcher prefetcher(reader.Plan(), reader.Read(), 2);
  auto images = prefetcher.Take({5, 6});
  ASSERT_TRUE(images.ok());
  EXPECT_EQ(Values(*images), (std::vector<float>{5, 6}));
  EXPECT_EQ(prefetcher.reads(), 0);
  EXPECT_EQ(reader.threads(5), std::vector<std::thread::id>{std::this_thread::get_id()});
}

TEST(ImagePrefetcher, TakingALaterBatchDropsTheRequestsBeforeIt) {
  Reader reader;
  ImagePrefetcher prefetcher(reader.Plan(), reader.Read(), 1);
  prefetcher.Request({1});
  prefetcher.Request({2});
  prefetcher.Request({3});
  auto later = prefetcher.Take({2});
  ASSERT_TRUE(later.ok());
  EXPECT_EQ(Values(*later), (std::vector<float>{2}));
  // {1} was dropped (read ahead or not): taking it now reads it here.
  auto dropped = prefetcher.Take({1});
  ASSERT_TRUE(dropped.ok());
  EXPECT_EQ(Values(*dropped), (std::vector<float>{1}));
  ASSERT_FALSE(reader.threads(1).empty());
  EXPECT_EQ(reader.threads(1).back(), std::this_thread::get_id());
  auto last = prefetcher.Take({3});
  ASSERT_TRUE(last.ok());
  EXPECT_EQ(Values(*last), (std::vector<float>{3}));
}

TEST(ImagePrefetcher, AReadsErrorIsReturnedByTheTakeOfItsBatch) {
  Reader reader;
  ImagePrefetcher prefetcher(reader.Plan(), reader.Read(), 2);
  prefetcher.Request({6, 7});
  prefetcher.Request({8, 9});
  auto failed = prefetcher.Take({6, 7});
  EXPECT_EQ(failed.status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(failed.status().message(), "sample 7 is missing");
  auto next = prefetcher.Take({8, 9});
  ASSERT_TRUE(next.ok());
  EXPECT_EQ(Values(*next), (std::vector<float>{8, 9}));
}

TEST(ImagePrefetcher, PlansEveryRequestAheadOfTheReadsItHoldsBack) {
  Reader reader;
  ImagePrefetcher prefetcher(reader.Plan(), reader.Read(), 1);
  prefetcher.Request({1, 2});
  prefetcher.Request({3, 4});
  prefetcher.Request({5, 6});
  // The third batch's plan comes while at most one batch of images is held, none taken.
  auto plan = prefetcher.PlanOf({5, 6});
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->text_tokens, (std::vector<int64_t>{5, 6}));
  EXPECT_EQ(prefetcher.plans(), 3);
  EXPECT_LE(prefetcher.reads(), 1);
  for (const std::vector<int64_t>& batch : {std::vector<int64_t>{1, 2}, {3, 4}, {5, 6}}) {
    auto read = prefetcher.Take(batch);
    ASSERT_TRUE(read.ok());
    EXPECT_EQ(read->plan.text_tokens, batch);
    EXPECT_EQ(Values(*read), std::vector<float>(batch.begin(), batch.end()));
  }
  EXPECT_EQ(prefetcher.plans(), 3);
  EXPECT_EQ(prefetcher.reads(), 3);
  EXPECT_NE(reader.threads(5).at(0), std::this_thread::get_id());
}

TEST(ImagePrefetcher, PlanOfAnUnrequestedBatchRequestsIt) {
  Reader reader;
  ImagePrefetcher prefetcher(reader.Plan(), reader.Read(), 2);
  auto plan = prefetcher.PlanOf({8, 9});
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->text_tokens, (std::vector<int64_t>{8, 9}));
  auto read = prefetcher.Take({8, 9});
  ASSERT_TRUE(read.ok());
  EXPECT_EQ(Values(*read), (std::vector<float>{8, 9}));
  ASSERT_EQ(reader.threads(8).size(), 1u);
  EXPECT_NE(reader.threads(8)[0], std::this_thread::get_id());
}

TEST(ImagePrefetcher, APlansErrorIsReturnedByPlanOfAndTakeAndNothingIsRead) {
  Reader reader;
  ImagePrefetcher prefetcher(reader.Plan(), reader.Read(), 2);
  prefetcher.Request({12, 13});
  auto plan = prefetcher.PlanOf({12, 13});
  EXPECT_EQ(plan.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(plan.status().message(), "sample 13 has no text");
  auto read = prefetcher.Take({12, 13});
  EXPECT_EQ(read.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(reader.threads(12).empty());
  // Unrequested, on the caller's thread alike.
  EXPECT_EQ(prefetcher.Take({13}).status().message(), "sample 13 has no text");
}

}  // namespace
}  // namespace tandem::step
