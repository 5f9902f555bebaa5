// coordinator/memory_store.h: the rendezvous store's counters.
#include "coordinator/memory_store.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <limits>

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

}  // namespace
}  // namespace tandem::coordinator
