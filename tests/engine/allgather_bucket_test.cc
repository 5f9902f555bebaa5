// zero_optimization.allgather_bucket_size bounds the elements of the post-step all-gathers in
// flight at once (engine_step.cc, AllGatherResident): a CountingCommunicator, which counts what is
// issued and not yet waited for, sees at most the bucket (or one unit, when a unit is larger),
// where the default issues every unit at once.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "engine/counting_communicator.h"
#include "engine/engine.h"
#include "engine_config/config.h"
#include "tests/testing/group.h"
#include "tests/testing/models.h"

namespace tandem::engine {
namespace {

// The largest post-step all-gather in flight, and the elements the step gathers in all.
struct Observed {
  int64_t max_in_flight = 0;
  int64_t total = 0;
  int64_t largest_unit = 0;
};

Observed RunStep(const std::string& allgather_bucket) {
  Observed observed;
  testing::RunGroup(2, [&](int rank, std::vector<std::shared_ptr<Communicator>>& comms) {
    torch::manual_seed(1);
    auto model = std::make_shared<testing::TinyNet>();
    auto config = ParseConfig(R"({"zero_optimization": {"stage": 1, "reduce_bucket_size": 40)" +
                              allgather_bucket + "}}");
    ASSERT_TRUE(config.ok()) << config.status();
    auto counting = std::make_shared<CountingCommunicator>(comms[0]);
    auto engine = Engine::Create(model, counting, *config);
    ASSERT_TRUE(engine.ok()) << engine.status();
    torch::mse_loss(model->forward(torch::randn({4, 5})), torch::randn({4, 3})).backward();
    counting->ResetMaxInFlight();
    ASSERT_TRUE((*engine)->Step().ok());
    if (rank == 0) {
      observed.max_in_flight = counting->max_all_gather_elements_in_flight();
      for (const Unit& unit : (*engine)->layout().units()) {
        observed.total += unit.padded;
        observed.largest_unit = std::max(observed.largest_unit, unit.padded);
      }
    }
  });
  return observed;
}

TEST(AllGatherBucket, BoundsTheElementsInFlightAfterTheStep) {
  const Observed unbounded = RunStep("");
  EXPECT_EQ(unbounded.max_in_flight, unbounded.total);  // the default: every unit at once
  ASSERT_GT(unbounded.total, 200);
  const Observed bounded = RunStep(R"(, "allgather_bucket_size": 300)");
  EXPECT_LE(bounded.max_in_flight, 300);
  EXPECT_GT(bounded.max_in_flight, bounded.largest_unit);  // units share the bucket
  const Observed one = RunStep(R"(, "allgather_bucket_size": 1)");
  EXPECT_EQ(one.max_in_flight, one.largest_unit);  // one unit at a time, however large
}

}  // namespace
}  // namespace tandem::engine
