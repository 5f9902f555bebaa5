// coordinator/memory_store.h: the rendezvous store's counters and bounds.
#include "coordinator/memory_store.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <future>
#include <limits>
#include <string>
#include <thread>

namespace tandem::coordinator {
namespace {

TEST(MemoryStore, AddCountsFromZero) {
  MemoryStore store;
  EXPECT_EQ(store.Add("count", 2).value(), 2);
  EXPECT_EQ(store.Add("count", -5).value(), -3);
}

TEST(MemoryStore, AddThatWouldOverflowIsRefusedAndKeepsTheValue) {
  MemoryStore store;
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  ASSERT_EQ(store.Add("count", kMax - 1).value(), kMax - 1);
  const absl::StatusOr<int64_t> over = store.Add("count", 2);
  EXPECT_EQ(over.status().code(), absl::StatusCode::kOutOfRange);
  EXPECT_EQ(over.status().message(),
            "rendezvous store: key count: adding 2 overflows a 64-bit integer");
  EXPECT_EQ(store.Add("count", 1).value(), kMax);
  EXPECT_EQ(store.Add("low", std::numeric_limits<int64_t>::min()).value(),
            std::numeric_limits<int64_t>::min());
  EXPECT_EQ(store.Add("low", -1).status().code(), absl::StatusCode::kOutOfRange);
}

TEST(MemoryStore, KeysAndValuesBeyondTheirBoundsAreRefused) {
  MemoryStore store;
  const std::string long_key(MemoryStore::kMaxKeyBytes + 1, 'k');
  EXPECT_EQ(store.Set(long_key, "v").message(),
            "rendezvous store: a key of 1025 bytes; keys are at most 1024");
  EXPECT_EQ(store.Get(long_key, std::chrono::milliseconds(0)).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(store.Add(long_key, 1).status().code(), absl::StatusCode::kInvalidArgument);
  const absl::Status big = store.Set("job/1/k", std::string(MemoryStore::kMaxValueBytes + 1, 'v'));
  EXPECT_EQ(big.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(big.message(),
            "rendezvous store: key job/1/k: a value of 1048577 bytes; values are at most 1048576");
  EXPECT_FALSE(store.Check("job/1/k").value());
}

TEST(MemoryStore, AFullStoreRefusesNewBytesAndTakesThemOnceKeysAreDeleted) {
  MemoryStore store(MemoryStore::Limits{.max_bytes = 100});
  ASSERT_TRUE(store.Set("a", std::string(60, 'x')).ok());  // 61 bytes
  ASSERT_TRUE(store.Set("b", std::string(30, 'x')).ok());  // 92
  const absl::Status full = store.Set("c", std::string(30, 'x'));
  EXPECT_EQ(full.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(full.message(), "rendezvous store: key c: the store holds 92 bytes, and at most 100");
  ASSERT_TRUE(store.Set("a", std::string(10, 'x')).ok());  // replacing counts the difference: 42
  ASSERT_TRUE(store.Set("c", std::string(30, 'x')).ok());  // 73
  store.DeleteWithPrefix("");
  EXPECT_TRUE(store.Set("d", std::string(90, 'x')).ok()) << "deleted keys gave their bytes back";
}

TEST(MemoryStore, AGetWaitsNoLongerThanTheLimitAndNoMoreThanTheLimitOfGetsWait) {
  MemoryStore store(MemoryStore::Limits{.max_wait = std::chrono::seconds(60), .max_waiters = 2});
  const absl::StatusOr<std::string> too_long = store.Get("job/1/k", std::chrono::seconds(61));
  EXPECT_EQ(too_long.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(too_long.status().message(),
            "rendezvous store: key job/1/k: a wait of 61000 ms; a Get waits at most 60000 ms");
  auto first = std::async(std::launch::async,
                          [&] { return store.Get("job/1/k", std::chrono::seconds(60)); });
  auto second = std::async(std::launch::async,
                           [&] { return store.Get("job/1/k", std::chrono::seconds(60)); });
  for (int tries = 0; tries < 3000 && store.waiters() < 2;
       ++tries) {  // until both wait (a minute at most)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  const absl::StatusOr<std::string> third = store.Get("job/1/k", std::chrono::seconds(60));
  EXPECT_EQ(third.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(third.status().message(),
            "rendezvous store: key job/1/k: 2 Gets are waiting already, the most there may be");
  ASSERT_TRUE(store.Set("job/1/k", "v").ok());
  EXPECT_EQ(first.get().value(), "v");
  EXPECT_EQ(second.get().value(), "v");
  EXPECT_EQ(store.Get("job/1/k", std::chrono::seconds(60)).value(), "v")
      << "a set key is read without waiting";
}

}  // namespace
}  // namespace tandem::coordinator
