// coordinator/job_feed.h: a feed keeps its last kTail updates and the coordinator the feeds of its
// last kClosedFeeds ended jobs, so memory stays bounded however long it runs; a reader behind the
// kept tail continues from its oldest update, with the right next index.
#include "coordinator/job_feed.h"

#include <gtest/gtest.h>

#include <string>

namespace tandem::coordinator {
namespace {

v1::JobUpdate Step(int64_t step) {
  v1::JobUpdate update;
  update.mutable_event()->set_text("step " + std::to_string(step));
  return update;
}

TEST(JobFeeds, KeepsTheLastUpdatesAndTheLastEndedFeeds) {
  JobFeeds feeds;
  const size_t published = JobFeeds::kTail + 100;
  for (size_t i = 0; i < published; ++i) feeds.Publish("job-1", Step(static_cast<int64_t>(i)));
  EXPECT_EQ(feeds.Size("job-1"), published);
  EXPECT_EQ(feeds.updates(), JobFeeds::kTail);

  size_t next = 5;  // dropped long ago: continues from the oldest kept
  bool closed = true;
  std::vector<v1::JobUpdate> read =
      feeds.Read("job-1", &next, std::chrono::milliseconds(0), &closed);
  ASSERT_EQ(read.size(), JobFeeds::kTail);
  EXPECT_EQ(read.front().event().text(), "step 100");
  EXPECT_EQ(next, published);
  EXPECT_FALSE(closed);
  EXPECT_TRUE(feeds.Read("job-1", &next, std::chrono::milliseconds(0), &closed).empty());
  EXPECT_EQ(next, published);

  feeds.Close("job-1");
  EXPECT_TRUE(feeds.Read("job-1", &next, std::chrono::milliseconds(0), &closed).empty());
  EXPECT_TRUE(closed);

  for (size_t j = 2; j < 2 + JobFeeds::kClosedFeeds; ++j) {
    const std::string id = "job-" + std::to_string(j);
    feeds.Publish(id, Step(1));
    feeds.Close(id);
  }
  EXPECT_EQ(feeds.feeds(), JobFeeds::kClosedFeeds);  // job-1's feed went first
  EXPECT_EQ(feeds.Size("job-1"), 0u);
  next = 0;
  EXPECT_TRUE(feeds.Read("job-1", &next, std::chrono::milliseconds(0), &closed).empty());
  EXPECT_FALSE(closed);  // not held: the caller asks the store
}

}  // namespace
}  // namespace tandem::coordinator
