// The hold gate of the tests' fault hook: a job is held at the step its hold file names for as long
// as the file exists, nothing else holds it, and Interrupt ends a wait at once.
#include "coordinator/step_hold.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <future>
#include <string>

#include "common/atomic_file.h"

namespace tandem::coordinator {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

// Longer than several polls of the file: a wait still running after it is held, not slow.
constexpr milliseconds kStillHeld{300};
// Generous for a released or interrupted wait to return, on any machine.
constexpr seconds kPrompt{10};

class StepHoldTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char pattern[] = "/tmp/tandem-hold-XXXXXX";
    ASSERT_NE(mkdtemp(pattern), nullptr);
    dir_ = pattern;
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  void Write(const std::string& job, const std::string& text) {
    ASSERT_TRUE(WriteFileAtomically(dir_ + "/" + job + ".hold", text).ok());
  }

  std::string dir_;
};

TEST_F(StepHoldTest, FileNamingTheStepHoldsTheJobUntilItIsRemoved) {
  Write("held", "10\n");
  StepHold hold(dir_, "held");
  EXPECT_EQ(hold.path(), dir_ + "/held.hold");
  EXPECT_EQ(hold.HeldStep(), 10);
  std::future<bool> wait = std::async(std::launch::async, [&] { return hold.WaitWhileHeld(10); });
  EXPECT_EQ(wait.wait_for(kStillHeld), std::future_status::timeout);
  std::filesystem::remove(hold.path());
  ASSERT_EQ(wait.wait_for(kPrompt), std::future_status::ready);
  EXPECT_TRUE(wait.get());
  EXPECT_EQ(hold.HeldStep(), std::nullopt);
}

TEST_F(StepHoldTest, NamingAnotherStepReleasesTheJob) {
  Write("held", "5");
  StepHold hold(dir_, "held");
  std::future<bool> wait = std::async(std::launch::async, [&] { return hold.WaitWhileHeld(5); });
  EXPECT_EQ(wait.wait_for(kStillHeld), std::future_status::timeout);
  Write("held", "20");
  ASSERT_EQ(wait.wait_for(kPrompt), std::future_status::ready);
  EXPECT_TRUE(wait.get());
}

TEST_F(StepHoldTest, OtherJobsAndOtherStepsAreNotHeld) {
  Write("held", "10");
  EXPECT_EQ(StepHold(dir_, "other").HeldStep(), std::nullopt);
  EXPECT_TRUE(StepHold(dir_, "other").WaitWhileHeld(10));
  EXPECT_TRUE(StepHold(dir_, "held").WaitWhileHeld(9));
  EXPECT_EQ(StepHold("", "held").HeldStep(), std::nullopt);
  EXPECT_EQ(StepHold("", "held").path(), "");
  EXPECT_TRUE(StepHold("", "held").WaitWhileHeld(10));
}

TEST_F(StepHoldTest, InterruptEndsTheWaitAtOnceAndEveryLaterOne) {
  Write("held", "10");
  StepHold hold(dir_, "held", /*poll=*/seconds(3600));  // only Interrupt can end this wait
  std::future<bool> wait = std::async(std::launch::async, [&] { return hold.WaitWhileHeld(10); });
  EXPECT_EQ(wait.wait_for(kStillHeld), std::future_status::timeout);
  hold.Interrupt();
  ASSERT_EQ(wait.wait_for(kPrompt), std::future_status::ready);
  EXPECT_FALSE(wait.get());
  EXPECT_FALSE(hold.WaitWhileHeld(10));
}

TEST_F(StepHoldTest, AnythingButAStepNumberHoldsNothing) {
  StepHold hold(dir_, "held");
  for (const char* text : {"", "ten", "-1", "10 11", "1e3"}) {
    Write("held", text);
    EXPECT_EQ(hold.HeldStep(), std::nullopt) << "'" << text << "'";
  }
  Write("held", " 0 \n");
  EXPECT_EQ(hold.HeldStep(), 0);
}

}  // namespace
}  // namespace tandem::coordinator
