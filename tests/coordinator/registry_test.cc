// The actor registry: gang reservation is all or nothing, in registration order, and says what a
// job waits for; liveness runs on an injected clock.
#include "coordinator/registry.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace tandem::coordinator {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

class RegistryTest : public ::testing::Test {
 protected:
  Clock::time_point now_ = Clock::time_point() + std::chrono::hours(1);
  Registry registry_{std::chrono::seconds(10), [this] { return now_; }};

  std::string Add(const std::string& pool, int port) {
    return registry_.Register(pool, "cpu", "127.0.0.1:" + std::to_string(port)).value();
  }
};

std::vector<std::string> Ids(const std::vector<ActorEntry>& actors) {
  std::vector<std::string> ids;
  for (const ActorEntry& a : actors) ids.push_back(a.id);
  return ids;
}

TEST_F(RegistryTest, IdsArePerPoolSequences) {
  EXPECT_EQ(Add("vision", 1), "vision-0");
  EXPECT_EQ(Add("llm", 2), "llm-0");
  EXPECT_EQ(Add("vision", 3), "vision-1");
}

TEST_F(RegistryTest, RegisterRejectsEmptyPoolOrAddress) {
  EXPECT_EQ(registry_.Register("", "cpu", "h:1").status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(registry_.Register("vision", "cpu", "").status().code(),
            absl::StatusCode::kInvalidArgument);
}

// Pool names reach logs, metrics labels and `tandem actors`: bounded, and of name characters.
TEST_F(RegistryTest, RegisterRejectsPoolNamesThatCouldForgeLogLinesAndOverlongFields) {
  EXPECT_EQ(registry_.Register("gpu\nERROR forged", "cpu", "h:1").status().message(),
            "RegisterActor: pool must be of the characters A-Z a-z 0-9 . _ -, got \"gpu\\nERROR "
            "forged\"");
  EXPECT_EQ(registry_.Register(std::string(64, 'p'), "cpu", "h:1").status().message(),
            "RegisterActor: pool must be at most 63 characters, got 64");
  EXPECT_EQ(registry_.Register("vision", "cpu", std::string(256, 'h')).status().message(),
            "RegisterActor: an address or device of more than 255 characters");
  EXPECT_TRUE(registry_.List().empty());
  EXPECT_TRUE(registry_.Register(std::string(63, 'p'), "cuda:0", "h:1").ok());
}

TEST_F(RegistryTest, ReserveTakesEveryGroupOldestFirst) {
  Add("vision", 1);
  Add("vision", 2);
  Add("llm", 3);
  Add("vision", 4);
  auto groups = registry_.Reserve("job-1", {{"vision", 2}, {"llm", 1}});
  ASSERT_TRUE(groups.ok()) << groups.status();
  EXPECT_THAT(Ids((*groups)[0]), ElementsAre("vision-0", "vision-1"));
  EXPECT_THAT(Ids((*groups)[1]), ElementsAre("llm-0"));
}

TEST_F(RegistryTest, ReserveIsAllOrNothingAndSaysWhatIsMissing) {
  Add("vision", 1);
  Add("vision", 2);
  Add("llm", 3);
  ASSERT_TRUE(registry_.Reserve("job-0", {{"vision", 1}}).ok());
  auto groups = registry_.Reserve("job-1", {{"vision", 2}, {"llm", 1}});
  EXPECT_EQ(groups.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(groups.status().message(),
              HasSubstr("waiting for 2 actors of pool 'vision' (1 free of 2 registered)"));
  // Nothing was taken: another job still gets the llm actor.
  EXPECT_TRUE(registry_.Reserve("job-2", {{"llm", 1}}).ok());
}

TEST_F(RegistryTest, AnUnhealthyActorIsPassedOverUntilItsHeartbeatSaysOtherwise) {
  Add("vision", 1);
  Add("vision", 2);
  ASSERT_TRUE(
      registry_.Heartbeat("vision-0", "", 0, "idle", 0, "stuck: RunStep 3 has run for 400 s").ok());
  auto groups = registry_.Reserve("job-1", {{"vision", 1}});
  ASSERT_TRUE(groups.ok());
  EXPECT_THAT(Ids((*groups)[0]), ElementsAre("vision-1"));
  auto waiting = registry_.Reserve("job-2", {{"vision", 1}});
  EXPECT_THAT(
      waiting.status().message(),
      HasSubstr("waiting for 1 actors of pool 'vision' (0 free of 2 registered, 1 unhealthy)"));
  EXPECT_EQ(registry_.List()[0].unhealthy, "stuck: RunStep 3 has run for 400 s");
  ASSERT_TRUE(registry_.Heartbeat("vision-0", "", 0, "idle", 0, "").ok());
  EXPECT_TRUE(registry_.Reserve("job-2", {{"vision", 1}}).ok());
}

TEST_F(RegistryTest, APoolSmallerThanTheJobIsResourceExhaustedNotBusy) {
  Add("vision", 1);
  Add("llm", 2);
  Add("llm", 3);
  auto groups = registry_.Reserve("job-1", {{"vision", 1}, {"llm", 3}});
  EXPECT_EQ(groups.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(groups.status().message(), "pool 'llm' has 2 actors registered and the job needs 3");
  // Two groups on one pool need its actors together.
  auto shared = registry_.Reserve("job-2", {{"llm", 2}, {"llm", 1}});
  EXPECT_EQ(shared.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(shared.status().message(), "pool 'llm' has 2 actors registered and the job needs 3");
}

TEST_F(RegistryTest, DisjointJobsRunAtOnceAndFreedActorsReturn) {
  Add("vision", 1);
  Add("vision", 2);
  ASSERT_TRUE(registry_.Reserve("job-1", {{"vision", 1}}).ok());
  auto second = registry_.Reserve("job-2", {{"vision", 1}});
  ASSERT_TRUE(second.ok());
  EXPECT_THAT(Ids((*second)[0]), ElementsAre("vision-1"));
  EXPECT_FALSE(registry_.Reserve("job-3", {{"vision", 1}}).ok());
  registry_.Free("job-1");
  auto third = registry_.Reserve("job-3", {{"vision", 1}});
  ASSERT_TRUE(third.ok());
  EXPECT_THAT(Ids((*third)[0]), ElementsAre("vision-0"));
}

TEST_F(RegistryTest, GroupsSharingAPoolTakeDistinctActors) {
  Add("gpu", 1);
  Add("gpu", 2);
  Add("gpu", 3);
  auto groups = registry_.Reserve("job-1", {{"gpu", 2}, {"gpu", 1}});
  ASSERT_TRUE(groups.ok());
  EXPECT_THAT(Ids((*groups)[0]), ElementsAre("gpu-0", "gpu-1"));
  EXPECT_THAT(Ids((*groups)[1]), ElementsAre("gpu-2"));
}

TEST_F(RegistryTest, SilentActorsExpireAndTheirHeartbeatIsNotFound) {
  const std::string quiet = Add("vision", 1);
  const std::string busy = Add("llm", 2);
  now_ += std::chrono::seconds(6);
  ASSERT_TRUE(registry_.Heartbeat(busy, "", 3, "forward", 7).ok());
  now_ += std::chrono::seconds(6);  // quiet: 12 s without a heartbeat; busy: 6 s
  std::vector<ActorEntry> dead = registry_.Expire();
  EXPECT_THAT(Ids(dead), ElementsAre(quiet));
  EXPECT_THAT(Ids(registry_.List()), ElementsAre(busy));
  EXPECT_EQ(registry_.List()[0].phase, "forward");
  EXPECT_EQ(registry_.Heartbeat(quiet, "", 0, "idle", 0).code(), absl::StatusCode::kNotFound);
}

TEST_F(RegistryTest, ProgressCountsOnlyForTheJobTheActorIsReservedFor) {
  const std::string actor = Add("llm", 1);
  ASSERT_TRUE(registry_.Reserve("job-2", {{"llm", 1}}).ok());
  ASSERT_TRUE(registry_.Heartbeat(actor, "job-2", 4, "backward", 9).ok());
  now_ += std::chrono::seconds(6);
  // A report about another job keeps the actor alive and changes nothing else.
  ASSERT_TRUE(registry_.Heartbeat(actor, "job-1", 30, "forward", 50).ok());
  now_ += std::chrono::seconds(6);
  EXPECT_TRUE(registry_.Expire().empty());
  ASSERT_EQ(registry_.List().size(), 1u);
  EXPECT_EQ(registry_.List()[0].step, 4);
  EXPECT_EQ(registry_.List()[0].phase, "backward");
  EXPECT_EQ(registry_.List()[0].last_collective, 9);
}

TEST_F(RegistryTest, ReRegisteringAnAddressReplacesTheOldEntry) {
  Add("vision", 1);
  const std::string again = Add("vision", 1);
  EXPECT_EQ(again, "vision-1");
  EXPECT_THAT(Ids(registry_.List()), ElementsAre("vision-1"));
}

}  // namespace
}  // namespace tandem::coordinator
