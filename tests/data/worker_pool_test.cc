// Tests for data/worker_pool.cc: every task runs once, on several threads, results in their slots;
// a pool of one runs on the caller; loops one after another and from two callers.
#include "data/worker_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

namespace tandem::data {
namespace {

TEST(WorkerPool, RunsEveryTaskOnceAcrossItsThreads) {
  WorkerPool pool(4);
  EXPECT_EQ(pool.threads(), 4);
  std::vector<int64_t> squares(200, -1);
  std::mutex mutex;
  std::set<std::thread::id> threads;
  pool.ForEach(200, [&](int64_t i) {
    std::this_thread::sleep_for(std::chrono::microseconds(200));  // long enough to share
    squares[i] = i * i;
    std::lock_guard<std::mutex> lock(mutex);
    threads.insert(std::this_thread::get_id());
  });
  for (int64_t i = 0; i < 200; ++i) ASSERT_EQ(squares[i], i * i) << i;
  EXPECT_GT(threads.size(), 1u);
  EXPECT_LE(threads.size(), 4u);
  pool.ForEach(0, [&](int64_t) { FAIL() << "no task to run"; });
}

TEST(WorkerPool, APoolOfOneRunsOnTheCaller) {
  WorkerPool pool(1);
  std::vector<std::thread::id> ran;
  pool.ForEach(3, [&](int64_t) { ran.push_back(std::this_thread::get_id()); });
  EXPECT_EQ(ran, std::vector<std::thread::id>(3, std::this_thread::get_id()));
}

TEST(WorkerPool, LoopsFromTwoCallersEachRunWhole) {
  WorkerPool pool(3);
  std::atomic<int64_t> sums[2] = {0, 0};
  std::vector<std::thread> callers;
  for (int c = 0; c < 2; ++c) {
    callers.emplace_back([&, c] {
      for (int loop = 0; loop < 50; ++loop) pool.ForEach(10, [&](int64_t i) { sums[c] += i; });
    });
  }
  for (std::thread& caller : callers) caller.join();
  EXPECT_EQ(sums[0].load(), 50 * 45);
  EXPECT_EQ(sums[1].load(), 50 * 45);
}

}  // namespace
}  // namespace tandem::data
