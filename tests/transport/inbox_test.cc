// Tests for transport/inbox.cc: every validation rule of tandem.v1.Peer with its code and a message
// that names what was expected and what came; expectations that stay pending after a refused
// stream; Await's completion, timeout and cancellation.
#include "transport/inbox.h"

#include <algorithm>
#include <chrono>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "common/status_macros.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/transport/transport_testing.h"

namespace tandem::transport {
namespace {

using namespace std::chrono_literals;
using ::testing::AllOf;
using testing::AwaitThenCancel;
using ::testing::HasSubstr;
using testing::Pattern;
using testing::StartThread;
using testing::Tag;
using testing::Tensor;
using testing::Zeros;

constexpr std::chrono::milliseconds kLong = std::chrono::minutes(5);

TransferHeader HeaderOf(const TransferTag& tag, const Tensor& tensor) {
  return TransferHeader{tag, tensor.dtype, tensor.shape, static_cast<int64_t>(tensor.bytes.size())};
}

// Streams `source` in chunks of `chunk` bytes, as the Peer service does.
absl::Status Deliver(Inbox& inbox, const TransferTag& tag, const Tensor& source, size_t chunk = 5,
                     std::chrono::milliseconds wait = 0ms) {
  ASSIGN_OR_RETURN(Inbox::Delivery delivery, inbox.Begin(HeaderOf(tag, source), wait));
  size_t offset = 0;
  do {
    const size_t n = std::min(chunk, source.bytes.size() - offset);
    RETURN_IF_ERROR(delivery.Write(tag, static_cast<int64_t>(offset), source.span(offset, n)));
    offset += n;
  } while (offset < source.bytes.size());
  return delivery.Finish().status();
}

class InboxTest : public ::testing::Test {
 protected:
  InboxTest() { inbox_.SetJob("job-1"); }

  // Expects `tag` into the zeroed float32 [2, 3] destination_.
  void ExpectFloats(const TransferTag& tag) {
    ASSERT_TRUE(inbox_.Expect(tag, destination_.view()).ok());
  }

  // Expects Tag(1) and starts a stream for it that delivers its first `bytes` bytes.
  absl::StatusOr<Inbox::Delivery> StartStream(size_t bytes) {
    if (absl::Status status = inbox_.Expect(Tag(1), destination_.view()); !status.ok())
      return status;
    absl::StatusOr<Inbox::Delivery> delivery = inbox_.Begin(HeaderOf(Tag(1), source_), 0ms);
    if (delivery.ok() && bytes > 0) {
      if (absl::Status status = delivery->Write(Tag(1), 0, source_.span(0, bytes)); !status.ok())
        return status;
    }
    return delivery;
  }

  // A correct stream completes the expectation `tag` and lands byte-exact.
  void ExpectCorrectStreamDelivers(const TransferTag& tag) {
    ASSERT_TRUE(Deliver(inbox_, tag, source_).ok());
    ASSERT_TRUE(inbox_.Await(tag, 0ms).ok());
    EXPECT_EQ(destination_.bytes, source_.bytes);
  }

  Inbox inbox_;
  Tensor destination_ = Zeros(DType::kFloat32, {2, 3});
  Tensor source_ = Pattern(DType::kFloat32, {2, 3});
};

TEST_F(InboxTest, DeliversChunksIntoTheDestination) {
  const TransferTag tag = Tag(1);
  ExpectFloats(tag);
  ExpectCorrectStreamDelivers(tag);
}

TEST_F(InboxTest, FinishReportsTheBytesReceived) {
  const TransferTag tag = Tag(1);
  ExpectFloats(tag);
  absl::StatusOr<Inbox::Delivery> delivery = inbox_.Begin(HeaderOf(tag, source_), 0ms);
  ASSERT_TRUE(delivery.ok()) << delivery.status();
  ASSERT_TRUE(delivery->Write(tag, 0, source_.span(0, 24)).ok());
  absl::StatusOr<int64_t> received = delivery->Finish();
  ASSERT_TRUE(received.ok()) << received.status();
  EXPECT_EQ(*received, 24);
}

TEST_F(InboxTest, EmptyTensorCompletesWithOneEmptyChunk) {
  const TransferTag tag = Tag(1);
  Tensor empty = Zeros(DType::kFloat32, {0, 3});
  ASSERT_TRUE(inbox_.Expect(tag, empty.view()).ok());
  ASSERT_TRUE(Deliver(inbox_, tag, empty).ok());
  EXPECT_TRUE(inbox_.Await(tag, 0ms).ok());
}

TEST(Inbox, ExpectWithoutJobIsFailedPrecondition) {
  Inbox inbox;
  Tensor destination = Zeros(DType::kFloat32, {2});
  const absl::Status status = inbox.Expect(Tag(1), destination.view());
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(status.message(), HasSubstr("no job"));
}

TEST_F(InboxTest, ExpectOfAnotherJobIsInvalidArgument) {
  const absl::Status status =
      inbox_.Expect(Tag(1, TransferKind::kEmbeddings, "job-2"), destination_.view());
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), AllOf(HasSubstr("job-2"), HasSubstr("job-1")));
}

TEST_F(InboxTest, ExpectingATagTwiceIsInvalidArgument) {
  ExpectFloats(Tag(1));
  const absl::Status status = inbox_.Expect(Tag(1), destination_.view());
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("already expected"));
}

TEST_F(InboxTest, DestinationWhoseSizeDoesNotMatchItsShapeIsInvalidArgument) {
  TensorBytes destination = destination_.view();
  destination.shape = {2, 4};
  const absl::Status status = inbox_.Expect(Tag(1), destination);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("24 bytes for float32 [2, 4]"));
}

TEST(Inbox, ChunkWithoutJobIsFailedPrecondition) {
  Inbox inbox;
  Tensor source = Pattern(DType::kFloat32, {2, 3});
  const absl::Status status = Deliver(inbox, Tag(1), source);
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(status.message(), HasSubstr("the receiver has no job"));
}

TEST_F(InboxTest, ChunkOfAnotherJobIsInvalidArgument) {
  ExpectFloats(Tag(1));
  const absl::Status status = Deliver(inbox_, Tag(1, TransferKind::kEmbeddings, "job-2"), source_);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("job job-2, but the receiver's job is job-1"));
  ExpectCorrectStreamDelivers(Tag(1));
}

TEST_F(InboxTest, TagNotExpectedInTimeIsDeadlineExceeded) {
  const absl::Status status = Deliver(inbox_, Tag(1), source_, 5, 20ms);
  EXPECT_EQ(status.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(status.message(),
              HasSubstr("did not expect " + DescribeTag(Tag(1)) + " within 20 ms"));
}

TEST_F(InboxTest, StreamWaitsForItsTagToBeExpected) {
  auto delivered = StartThread([&] { return Deliver(inbox_, Tag(1), source_, 5, kLong); });
  ExpectFloats(Tag(1));
  ASSERT_TRUE(delivered.get().ok());
  EXPECT_TRUE(inbox_.Await(Tag(1), 0ms).ok());
  EXPECT_EQ(destination_.bytes, source_.bytes);
}

TEST_F(InboxTest, StaleStepIsInvalidArgumentWithoutWaiting) {
  ExpectFloats(Tag(3));
  const absl::Status status = Deliver(inbox_, Tag(2), source_, 5, kLong);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(),
              AllOf(HasSubstr("step 2"), HasSubstr("stale"), HasSubstr("embeddings of step 3")));
}

TEST_F(InboxTest, StalenessIsPerKind) {
  ExpectFloats(Tag(3, TransferKind::kEmbeddings));
  const absl::Status status = Deliver(inbox_, Tag(2, TransferKind::kGradients), source_, 5, 10ms);
  EXPECT_EQ(status.code(), absl::StatusCode::kDeadlineExceeded);
}

TEST_F(InboxTest, SetJobForgetsThePreviousJobsSteps) {
  ExpectFloats(Tag(3));
  inbox_.SetJob("job-1");
  ExpectFloats(Tag(1));
  ExpectCorrectStreamDelivers(Tag(1));
}

TEST_F(InboxTest, TransferReceivedCompletelyIsAlreadyExists) {
  ExpectFloats(Tag(1));
  ASSERT_TRUE(Deliver(inbox_, Tag(1), source_).ok());
  absl::Status status = Deliver(inbox_, Tag(1), source_);  // before Await
  EXPECT_EQ(status.code(), absl::StatusCode::kAlreadyExists);
  EXPECT_THAT(status.message(), HasSubstr("already received completely"));
  ASSERT_TRUE(inbox_.Await(Tag(1), 0ms).ok());
  status = Deliver(inbox_, Tag(1), source_, 5, kLong);  // after Await: no wait either
  EXPECT_EQ(status.code(), absl::StatusCode::kAlreadyExists);
}

TEST_F(InboxTest, TransferBeingReceivedByAnotherStreamIsAlreadyExists) {
  absl::StatusOr<Inbox::Delivery> first = StartStream(0);
  ASSERT_TRUE(first.ok()) << first.status();
  const absl::Status status = Deliver(inbox_, Tag(1), source_);
  EXPECT_EQ(status.code(), absl::StatusCode::kAlreadyExists);
  EXPECT_THAT(status.message(), HasSubstr("another stream"));
}

TEST_F(InboxTest, HeaderUnlikeTheDestinationIsInvalidArgument) {
  ExpectFloats(Tag(1));
  struct Case {
    TransferHeader header;
    std::string message;
  };
  const std::vector<Case> cases = {
      {{Tag(1), DType::kBFloat16, {2, 3}, 24}, "dtype bfloat16, but the receiver expects float32"},
      {{Tag(1), DType::kFloat32, {3, 2}, 24}, "shape [3, 2], but the receiver expects [2, 3]"},
      {{Tag(1), DType::kFloat32, {2, 3}, 20}, "total_bytes 20, but the receiver expects 24"},
  };
  for (const Case& c : cases) {
    const absl::StatusOr<Inbox::Delivery> delivery = inbox_.Begin(c.header, 0ms);
    EXPECT_EQ(delivery.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(delivery.status().message(), HasSubstr(c.message));
  }
  ExpectCorrectStreamDelivers(Tag(1));
}

TEST_F(InboxTest, ChunkOfAnotherTagInTheStreamIsInvalidArgument) {
  TransferTag other = Tag(1);
  other.sample_begin = 1;
  absl::StatusOr<Inbox::Delivery> delivery = StartStream(8);
  ASSERT_TRUE(delivery.ok()) << delivery.status();
  const absl::Status status = delivery->Write(other, 8, source_.span(8, 8));
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("samples [1, 2) from rank 0 in the stream of "));
  EXPECT_EQ(delivery->Write(Tag(1), 8, source_.span(8, 8)).code(),
            absl::StatusCode::kFailedPrecondition);
  ExpectCorrectStreamDelivers(Tag(1));
}

TEST_F(InboxTest, ChunkAtAnotherOffsetIsInvalidArgument) {
  absl::StatusOr<Inbox::Delivery> delivery = StartStream(8);
  ASSERT_TRUE(delivery.ok()) << delivery.status();
  const absl::Status status = delivery->Write(Tag(1), 12, source_.span(12, 8));
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("chunk at offset 12, but 8 bytes were received so far"));
  ExpectCorrectStreamDelivers(Tag(1));
}

TEST_F(InboxTest, BytesPastTheEndAreInvalidArgument) {
  const std::string too_long(28, 'x');
  absl::StatusOr<Inbox::Delivery> delivery = StartStream(0);
  ASSERT_TRUE(delivery.ok()) << delivery.status();
  const absl::Status status = delivery->Write(Tag(1), 0, too_long);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(),
              HasSubstr("chunk of 28 bytes at offset 0 runs past the end (24 bytes)"));
  ExpectCorrectStreamDelivers(Tag(1));
}

TEST_F(InboxTest, StreamEndingEarlyIsInvalidArgument) {
  absl::StatusOr<Inbox::Delivery> delivery = StartStream(16);
  ASSERT_TRUE(delivery.ok()) << delivery.status();
  const absl::Status status = delivery->Finish().status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("the stream ended after 16 of 24 bytes"));
  ExpectCorrectStreamDelivers(Tag(1));
}

TEST_F(InboxTest, DroppedDeliveryLeavesTheTransferPending) {
  {
    absl::StatusOr<Inbox::Delivery> delivery = StartStream(8);
    ASSERT_TRUE(delivery.ok()) << delivery.status();
  }
  ExpectCorrectStreamDelivers(Tag(1));
}

TEST_F(InboxTest, AwaitTimeoutNamesTheTagAndTheBytesThatArrived) {
  absl::StatusOr<Inbox::Delivery> delivery = StartStream(8);
  ASSERT_TRUE(delivery.ok()) << delivery.status();
  const absl::Status status = inbox_.Await(Tag(1), 10ms);
  EXPECT_EQ(status.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(status.message(),
              AllOf(HasSubstr(DescribeTag(Tag(1))), HasSubstr("8 of 24 bytes arrived"),
                    HasSubstr("a stream is delivering it")));
  // The expectation is gone: the stream is told, and a second Await finds nothing.
  const absl::Status refused = delivery->Write(Tag(1), 8, source_.span(8, 8));
  EXPECT_EQ(refused.code(), absl::StatusCode::kCancelled);
  EXPECT_THAT(refused.message(),
              HasSubstr("the receiver stopped waiting for it after 8 of 24 bytes"));
  EXPECT_EQ(inbox_.Await(Tag(1), 0ms).code(), absl::StatusCode::kNotFound);
}

TEST_F(InboxTest, AwaitOfATagNeverExpectedIsNotFound) {
  const absl::Status status = inbox_.Await(Tag(1), 0ms);
  EXPECT_EQ(status.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(status.message(), HasSubstr("is not expected"));
}

// Expects Tag(1) again after it was withdrawn.
absl::Status ExpectAgain(Inbox& inbox, Tensor& destination) {
  inbox.SetJob("job-1");
  return inbox.Expect(Tag(1), destination.view());
}

TEST_F(InboxTest, ClearJobCancelsAWaitingAwait) {
  const absl::Status status =
      AwaitThenCancel([&] { return ExpectAgain(inbox_, destination_); },
                      [&] { return inbox_.Await(Tag(1), kLong); }, [&] { inbox_.ClearJob(); });
  EXPECT_EQ(status.code(), absl::StatusCode::kCancelled);
  EXPECT_THAT(status.message(), HasSubstr("the receiver's job was released"));
}

TEST_F(InboxTest, ResetCancelsAWaitingAwaitAndKeepsTheJob) {
  const absl::Status status =
      AwaitThenCancel([&] { return ExpectAgain(inbox_, destination_); },
                      [&] { return inbox_.Await(Tag(1), kLong); }, [&] { inbox_.Reset(); });
  EXPECT_EQ(status.code(), absl::StatusCode::kCancelled);
  EXPECT_THAT(status.message(), HasSubstr("reset"));
  ExpectFloats(Tag(1));
  ExpectCorrectStreamDelivers(Tag(1));
}

TEST_F(InboxTest, StreamInProgressIsToldWhenItsExpectationIsWithdrawn) {
  absl::StatusOr<Inbox::Delivery> delivery = StartStream(0);
  ASSERT_TRUE(delivery.ok()) << delivery.status();
  inbox_.Reset();
  EXPECT_EQ(delivery->Write(Tag(1), 0, source_.span(0, 8)).code(), absl::StatusCode::kCancelled);

  delivery = StartStream(8);
  ASSERT_TRUE(delivery.ok()) << delivery.status();
  inbox_.ClearJob();
  const absl::Status status = delivery->Finish().status();
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(status.message(), HasSubstr("the receiver's job was released"));
}

TEST_F(InboxTest, ExpectingAReceivedTagAgainAcceptsItAgain) {
  ExpectFloats(Tag(1));
  ASSERT_TRUE(Deliver(inbox_, Tag(1), source_).ok());
  ASSERT_TRUE(inbox_.Await(Tag(1), 0ms).ok());
  destination_ = Zeros(DType::kFloat32, {2, 3});
  ExpectFloats(Tag(1));
  ExpectCorrectStreamDelivers(Tag(1));
}

}  // namespace
}  // namespace tandem::transport
