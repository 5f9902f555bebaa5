#include <gtest/gtest.h>
#include <stdlib.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <limits>
#include <string>
#include <thread>
#include <vector>

#include "common/kv_store.h"

namespace tandem {
namespace {

using std::chrono::milliseconds;

// A fresh directory under the test's temp dir, removed on destruction.
class ScratchDir {
 public:
  ScratchDir() {
    std::string pattern = ::testing::TempDir() + "file_store_test_XXXXXX";
    std::vector<char> name(pattern.begin(), pattern.end());
    name.push_back('\0');
    EXPECT_NE(::mkdtemp(name.data()), nullptr);
    path_ = name.data();
  }
  ~ScratchDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

std::shared_ptr<KeyValueStore> Open(const std::string& directory) {
  auto store = OpenFileStore(directory);
  EXPECT_TRUE(store.ok()) << store.status();
  return store.ok() ? *store : nullptr;
}

TEST(FileStore, GetReturnsWhatSetWroteIncludingBinaryValuesAndOddKeys) {
  ScratchDir dir;
  auto store = Open(dir.path() + "/nested/store");
  ASSERT_NE(store, nullptr);
  const std::string binary("a\0b\xff", 4);
  ASSERT_TRUE(store->Set("rank/0 addr:port", binary).ok());
  ASSERT_TRUE(store->Set("../escape", "x").ok());
  auto value = store->Get("rank/0 addr:port", milliseconds(1000));
  ASSERT_TRUE(value.ok()) << value.status();
  EXPECT_EQ(*value, binary);
  ASSERT_TRUE(store->Set("rank/0 addr:port", "replaced").ok());
  EXPECT_EQ(store->Get("rank/0 addr:port", milliseconds(1000)).value(), "replaced");
  EXPECT_EQ(store->Get("../escape", milliseconds(1000)).value(), "x");
  EXPECT_FALSE(std::filesystem::exists(dir.path() + "/nested/escape"));
}

TEST(FileStore, GetOfMissingKeyIsDeadlineExceededNamingKeyAndDirectory) {
  ScratchDir dir;
  auto store = Open(dir.path());
  ASSERT_NE(store, nullptr);
  const auto start = std::chrono::steady_clock::now();
  auto value = store->Get("never/set", milliseconds(50));
  EXPECT_GE(std::chrono::steady_clock::now() - start, milliseconds(50));
  EXPECT_EQ(value.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_NE(value.status().message().find("never/set"), std::string::npos) << value.status();
  EXPECT_NE(value.status().message().find(dir.path()), std::string::npos) << value.status();
}

TEST(FileStore, GetWaitsForAKeySetLaterByAnotherThread) {
  ScratchDir dir;
  auto store = Open(dir.path());
  ASSERT_NE(store, nullptr);
  std::thread writer([&] { EXPECT_TRUE(store->Set("late", "value").ok()); });
  auto value = store->Get("late", milliseconds(20000));
  writer.join();
  ASSERT_TRUE(value.ok()) << value.status();
  EXPECT_EQ(*value, "value");
}

TEST(FileStore, AddFromSeveralThreadsSumsEveryDelta) {
  ScratchDir dir;
  auto store = Open(dir.path());
  ASSERT_NE(store, nullptr);
  constexpr int kThreads = 4;
  constexpr int kAddsPerThread = 50;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      // Each thread has its own store object, as each rank of a group would.
      auto own = Open(dir.path());
      for (int i = 0; i < kAddsPerThread; ++i) {
        auto value = own->Add("counter", t + 1);
        EXPECT_TRUE(value.ok()) << value.status();
      }
    });
  }
  for (auto& thread : threads) thread.join();
  auto total = store->Add("counter", 0);
  ASSERT_TRUE(total.ok()) << total.status();
  EXPECT_EQ(*total, kAddsPerThread * (1 + 2 + 3 + 4));
  EXPECT_EQ(store->Get("counter", milliseconds(1000)).value(), std::to_string(*total));
}

TEST(FileStore, AddStartsFromZeroAndAcceptsNegativeDeltas) {
  ScratchDir dir;
  auto store = Open(dir.path());
  ASSERT_NE(store, nullptr);
  EXPECT_EQ(store->Add("n", -3).value(), -3);
  EXPECT_EQ(store->Add("n", 10).value(), 7);
}

TEST(FileStore, AddThatWouldOverflowIsOutOfRangeAndKeepsTheValue) {
  ScratchDir dir;
  auto store = Open(dir.path());
  ASSERT_NE(store, nullptr);
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  ASSERT_EQ(store->Add("n", kMax).value(), kMax);
  auto over = store->Add("n", 1);
  EXPECT_EQ(over.status().code(), absl::StatusCode::kOutOfRange);
  EXPECT_NE(over.status().message().find("Add on key \"n\": adding 1 overflows a 64-bit integer"),
            std::string::npos)
      << over.status();
  EXPECT_EQ(store->Get("n", milliseconds(1000)).value(), std::to_string(kMax));
}

TEST(FileStore, AddOnNonIntegerValueIsFailedPrecondition) {
  ScratchDir dir;
  auto store = Open(dir.path());
  ASSERT_NE(store, nullptr);
  ASSERT_TRUE(store->Set("text", "abc").ok());
  auto value = store->Add("text", 1);
  EXPECT_EQ(value.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(value.status().message().find("text"), std::string::npos) << value.status();
}

TEST(FileStore, CheckAndDeleteFollowTheKeysLifetime) {
  ScratchDir dir;
  auto store = Open(dir.path());
  ASSERT_NE(store, nullptr);
  EXPECT_FALSE(store->Check("k").value());
  ASSERT_TRUE(store->Set("k", "v").ok());
  EXPECT_TRUE(store->Check("k").value());
  EXPECT_TRUE(store->Delete("k").ok());
  EXPECT_FALSE(store->Check("k").value());
  absl::Status again = store->Delete("k");
  EXPECT_EQ(again.code(), absl::StatusCode::kNotFound);
  EXPECT_NE(again.message().find("\"k\""), std::string::npos) << again;
}

TEST(FileStore, TwoStoresOnOneDirectorySeeEachOthersKeys) {
  ScratchDir dir;
  auto first = Open(dir.path());
  auto second = Open(dir.path());
  ASSERT_NE(first, nullptr);
  ASSERT_NE(second, nullptr);
  ASSERT_TRUE(first->Set("from_first", "1").ok());
  ASSERT_TRUE(second->Set("from_second", "2").ok());
  EXPECT_EQ(second->Get("from_first", milliseconds(1000)).value(), "1");
  EXPECT_EQ(first->Get("from_second", milliseconds(1000)).value(), "2");
  EXPECT_EQ(first->Add("shared", 5).value(), 5);
  EXPECT_EQ(second->Add("shared", 1).value(), 6);
  ASSERT_TRUE(second->Delete("from_first").ok());
  EXPECT_FALSE(first->Check("from_first").value());
}

TEST(FileStore, RejectsEmptyAndOverlongKeys) {
  ScratchDir dir;
  auto store = Open(dir.path());
  ASSERT_NE(store, nullptr);
  EXPECT_EQ(store->Set("", "v").code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(store->Set(std::string(1000, 'x'), "v").code(), absl::StatusCode::kInvalidArgument);
}

TEST(FileStore, OpenFailsOnAPathThatIsAFile) {
  ScratchDir dir;
  const std::string file = dir.path() + "/plain_file";
  std::ofstream(file) << "not a directory";
  auto store = OpenFileStore(file);
  EXPECT_EQ(store.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(store.status().message().find(file), std::string::npos) << store.status();
}

}  // namespace
}  // namespace tandem
