// Fibers (trainer/fiber.h): two lines of control on one thread switch only where they yield, and
// each keeps its own LibTorch thread-local state (grad mode) across the switches.
#include "trainer/fiber.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <string>
#include <thread>
#include <vector>

namespace tandem::trainer {
namespace {

TEST(Fiber, TwoFibersInterleaveAtTheirYieldsOnTheCallersThread) {
  Fiber a, b;
  std::vector<std::string> order;
  const std::thread::id caller = std::this_thread::get_id();
  bool same_thread = true;
  a.Start([&] {
    order.push_back("a1");
    a.Yield();
    order.push_back("a2");
    same_thread = same_thread && std::this_thread::get_id() == caller;
  });
  b.Start([&] {
    order.push_back("b1");
    b.Yield();
    order.push_back("b2");
    b.Yield();
    order.push_back("b3");
  });
  while (!a.finished() || !b.finished()) {
    if (!a.finished()) a.Resume();
    if (!b.finished()) b.Resume();
  }
  EXPECT_EQ(order, (std::vector<std::string>{"a1", "b1", "a2", "b2", "b3"}));
  EXPECT_TRUE(same_thread);
}

TEST(Fiber, EachFiberKeepsItsOwnGradModeAcrossSwitches) {
  Fiber evaluating, training;
  bool evaluating_saw_grad = true, training_saw_grad = false;
  evaluating.Start([&] {
    torch::NoGradGuard no_grad;
    evaluating.Yield();
    evaluating_saw_grad = torch::GradMode::is_enabled();
  });
  training.Start([&] { training_saw_grad = torch::GradMode::is_enabled(); });
  evaluating.Resume();  // disables grad, yields
  training.Resume();
  evaluating.Resume();
  EXPECT_TRUE(evaluating.finished() && training.finished());
  EXPECT_TRUE(training_saw_grad);
  EXPECT_FALSE(evaluating_saw_grad);
  EXPECT_TRUE(torch::GradMode::is_enabled());  // the caller's own, untouched
}

TEST(Fiber, AFinishedFiberRunsANewBodyFromItsStart) {
  Fiber fiber;
  int runs = 0;
  for (int i = 0; i < 3; ++i) {
    fiber.Start([&] { ++runs; });
    fiber.Resume();
    EXPECT_TRUE(fiber.finished());
  }
  EXPECT_EQ(runs, 3);
}

}  // namespace
}  // namespace tandem::trainer
