// The in-process transport (transport/in_process.h): sends land in the receiver's expected tensor
// whether the receiver expected them before or after, mismatches are refused with the inbox's
// errors, and Abort ends every wait at once.
#include "transport/in_process.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <thread>
#include <vector>

namespace tandem::transport {
namespace {

using ::testing::HasSubstr;
using namespace std::chrono_literals;

TransferTag Tag(int64_t step) {
  TransferTag tag;
  tag.job_id = "job#1";
  tag.kind = TransferKind::kEmbeddings;
  tag.step = step;
  tag.sample_end = 4;
  return tag;
}

TensorBytes Bytes(std::vector<float>& values) {
  return {DType::kFloat32,
          {static_cast<int64_t>(values.size())},
          reinterpret_cast<std::byte*>(values.data()),
          values.size() * sizeof(float)};
}

TEST(InProcessTransport, ASendToAnExpectedTransferLandsInTheReceiversTensor) {
  InProcessFabric fabric("job#1", 1, 2, 10s);
  auto sender = fabric.Endpoint(0, 0), receiver = fabric.Endpoint(1, 1);
  std::vector<float> source{1, 2, 3, 4}, destination(4, 0);
  ASSERT_TRUE(receiver->Expect(Tag(1), Bytes(destination)).ok());
  EXPECT_TRUE(sender->Send(1, Tag(1), Bytes(source))->Wait(1s).ok());
  EXPECT_TRUE(receiver->Await(Tag(1), 1s).ok());
  EXPECT_EQ(destination, source);
}

TEST(InProcessTransport, ASendAheadOfItsReceiverWaitsForTheExpectation) {
  InProcessFabric fabric("job#1", 1, 1, 10s);
  auto sender = fabric.Endpoint(0, 0), receiver = fabric.Endpoint(1, 0);
  std::vector<float> source{5, 6, 7, 8}, destination(4, 0);
  auto send = sender->Send(0, Tag(1), Bytes(source));
  std::this_thread::sleep_for(20ms);  // the receiver comes late; any delay gives the same result
  ASSERT_TRUE(receiver->Expect(Tag(1), Bytes(destination)).ok());
  EXPECT_TRUE(receiver->Await(Tag(1), 10s).ok());
  EXPECT_TRUE(send->Wait(10s).ok());
  EXPECT_EQ(destination, source);
}

TEST(InProcessTransport, AShapeUnlikeTheExpectedOneIsRefusedNamingBoth) {
  InProcessFabric fabric("job#1", 1, 1, 10s);
  std::vector<float> source{1, 2, 3}, destination(4, 0);
  ASSERT_TRUE(fabric.Endpoint(1, 0)->Expect(Tag(1), Bytes(destination)).ok());
  const absl::Status status = fabric.Endpoint(0, 0)->Send(0, Tag(1), Bytes(source))->Wait(1s);
  EXPECT_TRUE(absl::IsInvalidArgument(status)) << status;
  EXPECT_THAT(std::string(status.message()), HasSubstr("shape [3], but the receiver expects [4]"));
}

TEST(InProcessTransport, APeerRankOutsideTheOtherGroupIsRefused) {
  InProcessFabric fabric("job#1", 1, 2, 10s);
  std::vector<float> source{1, 2, 3, 4};
  const absl::Status status = fabric.Endpoint(0, 0)->Send(2, Tag(1), Bytes(source))->Wait(1s);
  EXPECT_TRUE(absl::IsInvalidArgument(status)) << status;
  EXPECT_THAT(std::string(status.message()), HasSubstr("peer rank 2 outside [0, 2)"));
}

TEST(InProcessTransport, AbortEndsAWaitingReceiverAndAWaitingSenderAtOnce) {
  InProcessFabric fabric("job#1", 1, 1, 60s);
  auto sender = fabric.Endpoint(0, 0), receiver = fabric.Endpoint(1, 0);
  std::vector<float> source{1, 2, 3, 4}, destination(4, 0);
  ASSERT_TRUE(sender->Expect(Tag(1), Bytes(destination)).ok());
  auto send = sender->Send(0, Tag(2), Bytes(source));  // never expected
  absl::Status awaited;
  std::thread waiter([&] { awaited = sender->Await(Tag(1), 60s); });
  std::this_thread::sleep_for(20ms);
  const auto start = std::chrono::steady_clock::now();
  fabric.Abort();
  waiter.join();
  const absl::Status sent = send->Wait(60s);
  EXPECT_LT(std::chrono::steady_clock::now() - start, 30s);
  EXPECT_TRUE(absl::IsCancelled(awaited)) << awaited;
  EXPECT_TRUE(absl::IsFailedPrecondition(sent)) << sent;
}

}  // namespace
}  // namespace tandem::transport
