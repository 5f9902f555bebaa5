// Tests for transport/peer_service.cc, fed hand-made chunk streams through a raw tandem.v1.Peer
// stub: proto values the sender's transport never produces, the acknowledgement, the inbox's codes
// mapped one to one, how long a stream waits for its tag to be expected, and the Transfers stream's
// acknowledgement of each message.
#include "transport/peer_service.h"

#include <grpcpp/client_context.h>
#include <grpcpp/create_channel.h>
#include <grpcpp/security/credentials.h>

#include <chrono>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "proto/tandem/v1/peer.grpc.pb.h"
#include "tests/transport/loopback_peer.h"
#include "tests/transport/transport_testing.h"
#include "transport/wire.h"

namespace tandem::transport {
namespace {

using namespace std::chrono_literals;
using ::testing::HasSubstr;
using testing::LoopbackPeer;
using testing::Pattern;
using testing::Tag;
using testing::Tensor;
using testing::Zeros;

// `tensor` as chunks of `chunk` bytes, the first carrying dtype, shape and size.
std::vector<v1::TensorChunk> Chunks(const TransferTag& tag, const Tensor& tensor, size_t chunk) {
  std::vector<v1::TensorChunk> chunks;
  for (size_t offset = 0; offset < tensor.bytes.size(); offset += chunk) {
    v1::TensorChunk& c = chunks.emplace_back();
    ToProto(tag, c.mutable_tag());
    if (offset == 0) {
      c.set_dtype(ToProto(tensor.dtype));
      for (int64_t dim : tensor.shape) c.add_shape(dim);
      c.set_total_bytes(static_cast<int64_t>(tensor.bytes.size()));
    }
    c.set_offset(static_cast<int64_t>(offset));
    c.set_data(std::string(tensor.span(offset, std::min(chunk, tensor.bytes.size() - offset))));
  }
  return chunks;
}

class PeerServiceTest : public ::testing::Test {
 protected:
  explicit PeerServiceTest(PeerServiceOptions options = {})
      : peer_(options),
        stub_(v1::Peer::NewStub(
            grpc::CreateChannel(peer_.address(), grpc::InsecureChannelCredentials()))) {}

  grpc::Status Send(const std::vector<v1::TensorChunk>& chunks,
                    std::chrono::milliseconds deadline = 30s) {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + deadline);
    ack_.Clear();
    auto writer = stub_->SendTensor(&context, &ack_);
    for (const v1::TensorChunk& chunk : chunks) {
      if (!writer->Write(chunk)) break;
    }
    writer->WritesDone();
    return writer->Finish();
  }

  LoopbackPeer peer_;
  std::unique_ptr<v1::Peer::Stub> stub_;
  v1::TransferAck ack_;
  Tensor destination_ = Zeros(DType::kFloat32, {4, 8});
  Tensor source_ = Pattern(DType::kFloat32, {4, 8});
};

TEST_F(PeerServiceTest, AcknowledgesEveryByteOfACompleteStream) {
  ASSERT_TRUE(peer_.inbox()->Expect(Tag(1), destination_.view()).ok());
  const grpc::Status status = Send(Chunks(Tag(1), source_, 48));
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(ack_.received_bytes(), 128);
  ASSERT_TRUE(peer_.inbox()->Await(Tag(1), 0ms).ok());
  EXPECT_EQ(destination_.bytes, source_.bytes);
}

TEST_F(PeerServiceTest, EmptyStreamIsInvalidArgument) {
  const grpc::Status status = Send({});
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(status.error_message(), HasSubstr("ended before its first chunk"));
}

TEST_F(PeerServiceTest, UnknownKindOrDtypeIsInvalidArgument) {
  ASSERT_TRUE(peer_.inbox()->Expect(Tag(1), destination_.view()).ok());
  std::vector<v1::TensorChunk> chunks = Chunks(Tag(1), source_, 128);
  chunks[0].mutable_tag()->set_kind(v1::TRANSFER_KIND_UNSPECIFIED);
  grpc::Status status = Send(chunks);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(status.error_message(), HasSubstr("unknown transfer kind 0"));

  chunks = Chunks(Tag(1), source_, 128);
  chunks[0].set_dtype(v1::DTYPE_UNSPECIFIED);
  status = Send(chunks);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(status.error_message(), HasSubstr("unknown dtype 0"));
}

TEST_F(PeerServiceTest, StreamEndingEarlyIsInvalidArgumentAndTheTransferStaysPending) {
  ASSERT_TRUE(peer_.inbox()->Expect(Tag(1), destination_.view()).ok());
  std::vector<v1::TensorChunk> chunks = Chunks(Tag(1), source_, 48);
  chunks.pop_back();
  grpc::Status status = Send(chunks);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(status.error_message(), HasSubstr("the stream ended after 96 of 128 bytes"));

  status = Send(Chunks(Tag(1), source_, 48));
  ASSERT_TRUE(status.ok()) << status.error_message();
  ASSERT_TRUE(peer_.inbox()->Await(Tag(1), 0ms).ok());
  EXPECT_EQ(destination_.bytes, source_.bytes);
}

TEST_F(PeerServiceTest, ChunkAtAnotherOffsetIsInvalidArgument) {
  ASSERT_TRUE(peer_.inbox()->Expect(Tag(1), destination_.view()).ok());
  std::vector<v1::TensorChunk> chunks = Chunks(Tag(1), source_, 48);
  chunks[1].set_offset(40);
  const grpc::Status status = Send(chunks);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(status.error_message(),
              HasSubstr("chunk at offset 40, but 48 bytes were received so far"));
}

TEST_F(PeerServiceTest, UnexpectedTagWaitsNoLongerThanTheCallersDeadline) {
  const grpc::Status status = Send(Chunks(Tag(1), source_, 128), 100ms);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED);
}

// One Transfers stream carrying `messages` in order; returns the acknowledgements.
std::vector<v1::TransferAck> SendOnOneStream(v1::Peer::Stub& stub,
                                             const std::vector<v1::TensorChunk>& messages) {
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + 30s);
  auto stream = stub.Transfers(&context);
  std::vector<v1::TransferAck> acks;
  for (const v1::TensorChunk& message : messages) {
    if (!stream->Write(message)) break;
    v1::TransferAck ack;
    if (!stream->Read(&ack)) break;
    acks.push_back(ack);
  }
  stream->WritesDone();
  EXPECT_TRUE(stream->Finish().ok());
  return acks;
}

TEST_F(PeerServiceTest, TransfersAnswersEachMessageInOrderAndABadOneFailsAlone) {
  Tensor second_destination = Zeros(DType::kFloat32, {4, 8});
  Tensor second_source = Pattern(DType::kFloat32, {4, 8}, /*seed=*/9);
  ASSERT_TRUE(peer_.inbox()->Expect(Tag(1), destination_.view()).ok());
  ASSERT_TRUE(peer_.inbox()->Expect(Tag(2), second_destination.view()).ok());
  v1::TensorChunk first = Chunks(Tag(1), source_, 128)[0];
  first.set_expect_within_ms(10000);
  v1::TensorChunk wrong_job = Chunks(Tag(1, TransferKind::kEmbeddings, "job-2"), source_, 128)[0];
  wrong_job.set_expect_within_ms(10000);
  v1::TensorChunk second = Chunks(Tag(2), second_source, 128)[0];
  second.set_expect_within_ms(10000);

  const std::vector<v1::TransferAck> acks = SendOnOneStream(*stub_, {first, wrong_job, second});
  ASSERT_EQ(acks.size(), 3u);
  EXPECT_EQ(acks[0].code(), 0);
  EXPECT_EQ(acks[0].received_bytes(), 128);
  EXPECT_EQ(acks[1].code(), static_cast<int>(grpc::StatusCode::INVALID_ARGUMENT));
  EXPECT_THAT(acks[1].message(), HasSubstr("job job-2, but the receiver's job is job-1"));
  EXPECT_EQ(acks[2].code(), 0);
  EXPECT_EQ(acks[2].received_bytes(), 128);
  ASSERT_TRUE(peer_.inbox()->Await(Tag(1), 0ms).ok());
  ASSERT_TRUE(peer_.inbox()->Await(Tag(2), 0ms).ok());
  EXPECT_EQ(destination_.bytes, source_.bytes);
  EXPECT_EQ(second_destination.bytes, second_source.bytes);
}

TEST_F(PeerServiceTest, TransfersRefusesAPartOfATensor) {
  ASSERT_TRUE(peer_.inbox()->Expect(Tag(1), destination_.view()).ok());
  v1::TensorChunk part = Chunks(Tag(1), source_, 48)[0];
  part.set_expect_within_ms(10000);
  const std::vector<v1::TransferAck> acks = SendOnOneStream(*stub_, {part});
  ASSERT_EQ(acks.size(), 1u);
  EXPECT_EQ(acks[0].code(), static_cast<int>(grpc::StatusCode::INVALID_ARGUMENT));
  EXPECT_THAT(acks[0].message(),
              HasSubstr("must hold the whole tensor, but it holds 48 bytes at offset 0 of 128"));
  EXPECT_EQ(peer_.inbox()->Await(Tag(1), 0ms).code(),
            absl::StatusCode::kDeadlineExceeded);  // still pending
}

TEST_F(PeerServiceTest, TransfersWaitsForAnExpectationNoLongerThanTheMessageSays) {
  v1::TensorChunk message = Chunks(Tag(1), source_, 128)[0];
  message.set_expect_within_ms(50);
  const auto start = std::chrono::steady_clock::now();
  const std::vector<v1::TransferAck> acks = SendOnOneStream(*stub_, {message});
  EXPECT_LT(std::chrono::steady_clock::now() - start, 10s);
  ASSERT_EQ(acks.size(), 1u);
  EXPECT_EQ(acks[0].code(), static_cast<int>(grpc::StatusCode::DEADLINE_EXCEEDED));
  EXPECT_THAT(acks[0].message(),
              HasSubstr("the receiver did not expect " + DescribeTag(Tag(1)) + " within 50 ms"));
}

class PeerServiceShortWaitTest : public PeerServiceTest {
 protected:
  PeerServiceShortWaitTest()
      : PeerServiceTest(
            PeerServiceOptions{.expect_timeout = 20ms, .local_endpoint = std::nullopt}) {}
};

TEST_F(PeerServiceShortWaitTest, UnexpectedTagIsDeadlineExceededAfterTheExpectTimeout) {
  const grpc::Status status = Send(Chunks(Tag(1), source_, 128));
  EXPECT_EQ(status.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED);
  EXPECT_THAT(status.error_message(),
              HasSubstr("the receiver did not expect " + DescribeTag(Tag(1))));
}

}  // namespace
}  // namespace tandem::transport
