// The NCCL communicator (engine/nccl_communicator.cc) on one CUDA device: a group of one rank runs
// every operation through NCCL, fp32 and bf16, and gives each operation's single-rank result; a
// tensor on another device is refused by name. Needs a CUDA device; skipped without one.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <chrono>
#include <memory>
#include <string>

#include "common/kv_store.h"
#include "engine/communicator.h"
#include "tests/testing/group.h"

namespace tandem::engine {
namespace {

#ifdef TANDEM_HAVE_NCCL

constexpr std::chrono::seconds kWait{60};

class NcclCommunicatorTest : public ::testing::TestWithParam<c10::ScalarType> {
 protected:
  void SetUp() override {
    if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
    auto store = OpenFileStore(dir_.path());
    ASSERT_TRUE(store.ok()) << store.status();
    NcclOptions options;
    options.group_name = "nccl-test";
    options.timeout = std::chrono::seconds(60);
    auto nccl = CreateNcclCommunicator(*store, 0, 1, options);
    ASSERT_TRUE(nccl.ok()) << nccl.status();
    comm_ = *nccl;
  }
  at::Tensor Random(int64_t n) const {
    return torch::randn({n}, at::TensorOptions().dtype(GetParam()).device(c10::kCUDA, 0));
  }

  testing::TempDir dir_;
  std::shared_ptr<Communicator> comm_;
};

void ExpectEqual(const at::Tensor& actual, const at::Tensor& expected, const std::string& what) {
  EXPECT_TRUE(torch::equal(actual.cpu(), expected.cpu())) << what;
}

TEST_P(NcclCommunicatorTest, EveryOperationOfOneRankGivesItsInput) {
  EXPECT_EQ(comm_->world_size(), 1);
  const at::Tensor x = Random(4099);

  at::Tensor sum = x.clone();
  ASSERT_TRUE(comm_->AllReduceSum(sum)->Wait(kWait).ok());
  ExpectEqual(sum, x, "all-reduce");

  at::Tensor shard = torch::empty_like(x);
  ASSERT_TRUE(comm_->ReduceScatterSum(x, shard)->Wait(kWait).ok());
  ExpectEqual(shard, x, "reduce-scatter");

  at::Tensor gathered = torch::zeros_like(x);
  ASSERT_TRUE(comm_->AllGather(x, gathered)->Wait(kWait).ok());
  ExpectEqual(gathered, x, "all-gather");

  at::Tensor swapped = torch::zeros_like(x);
  ASSERT_TRUE(comm_->AllToAll(x, swapped)->Wait(kWait).ok());
  ExpectEqual(swapped, x, "all-to-all");

  at::Tensor broadcast = x.clone();
  ASSERT_TRUE(comm_->Broadcast(broadcast, 0)->Wait(kWait).ok());
  ExpectEqual(broadcast, x, "broadcast");

  ASSERT_TRUE(comm_->Barrier()->Wait(kWait).ok());
  EXPECT_EQ(comm_->last_sequence(), 6);
}

TEST_P(NcclCommunicatorTest, RefusesATensorOnTheCpu) {
  const absl::Status status = comm_->AllReduceSum(torch::ones({3}, GetParam()))->Wait(kWait);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("tensor is on cpu; the communicator is on cuda:0"),
            std::string::npos)
      << status;
}

INSTANTIATE_TEST_SUITE_P(Dtypes, NcclCommunicatorTest, ::testing::Values(at::kFloat, at::kBFloat16),
                         [](const auto& info) {
                           return std::string(info.param == at::kFloat ? "Fp32" : "Bf16");
                         });

#else

TEST(NcclCommunicatorTest, NotBuilt) { GTEST_SKIP() << "built without NCCL"; }

#endif  // TANDEM_HAVE_NCCL

}  // namespace
}  // namespace tandem::engine
