// Tests for transport/grpc_transport.cc: two actors on 127.0.0.1 in one process, each with an inbox
// served by a PeerService and a transport to the other. Every GrpcTransportTest runs twice: over
// gRPC (the peers serve no local endpoint) and over local links (they do). Tensors arrive
// byte-exact, large ones in several chunks and small ones on the peer's long-lived stream; refused
// transfers name the peer and leave the receiver working; a broken stream is opened again; a peer
// whose local endpoint is out of reach gets gRPC; nothing hangs.
#include "transport/grpc_transport.h"

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/transport/loopback_peer.h"
#include "tests/transport/transport_testing.h"

namespace tandem::transport {
namespace {

using namespace std::chrono_literals;
using ::testing::AllOf;
using testing::AwaitThenCancel;
using ::testing::HasSubstr;
using testing::LoopbackPeer;
using testing::Pattern;
using testing::Tag;
using testing::Tensor;
using testing::Zeros;

constexpr std::chrono::milliseconds kLong = std::chrono::minutes(1);

// A vision actor and an LLM actor, each sending to the other; the parameter: whether they serve
// local endpoints.
class GrpcTransportTest : public ::testing::TestWithParam<bool> {
 protected:
  explicit GrpcTransportTest(GrpcTransportOptions options = {})
      : vision_(PeerServiceOptions{}, 0, GetParam()),
        llm_(PeerServiceOptions{}, 0, GetParam()),
        vision_transport_(CreateGrpcTransport(vision_.inbox(), {llm_.address()}, options)),
        llm_transport_(CreateGrpcTransport(llm_.inbox(), {vision_.address()}, options)) {}

  LoopbackPeer vision_;
  LoopbackPeer llm_;
  std::unique_ptr<Transport> vision_transport_;
  std::unique_ptr<Transport> llm_transport_;
};

TEST_P(GrpcTransportTest, Float32TensorArrivesByteExactInSeveralChunks) {
  Tensor source = Pattern(DType::kFloat32, {7, 128, 1024});  // 3.5 MiB: four 1 MiB chunks
  Tensor destination = Zeros(DType::kFloat32, {7, 128, 1024});
  ASSERT_EQ(source.bytes.size(), 3670016u);
  ASSERT_TRUE(llm_transport_->Expect(Tag(1), destination.view()).ok());
  const absl::Status sent = vision_transport_->Send(0, Tag(1), source.view())->Wait(kLong);
  ASSERT_TRUE(sent.ok()) << sent;
  ASSERT_TRUE(llm_transport_->Await(Tag(1), kLong).ok());
  EXPECT_EQ(destination.bytes, source.bytes);
  EXPECT_EQ(llm_.local_frames(), GetParam() ? 1 : 0);  // the path the parameter names
}

TEST_P(GrpcTransportTest, BFloat16GradientsFlowBack) {
  const TransferTag tag = Tag(1, TransferKind::kGradients);
  Tensor source = Pattern(DType::kBFloat16, {3, 16, 1000}, /*seed=*/7);
  Tensor destination = Zeros(DType::kBFloat16, {3, 16, 1000});
  ASSERT_TRUE(vision_transport_->Expect(tag, destination.view()).ok());
  const absl::Status sent = llm_transport_->Send(0, tag, source.view())->Wait(kLong);
  ASSERT_TRUE(sent.ok()) << sent;
  ASSERT_TRUE(vision_transport_->Await(tag, kLong).ok());
  EXPECT_EQ(destination.bytes, source.bytes);
}

TEST_P(GrpcTransportTest, SendAheadOfTheReceiverArrivesOnceExpected) {
  Tensor source = Pattern(DType::kFloat32, {4, 8});
  Tensor destination = Zeros(DType::kFloat32, {4, 8});
  std::unique_ptr<SendHandle> send = vision_transport_->Send(0, Tag(1), source.view());
  ASSERT_TRUE(llm_transport_->Expect(Tag(1), destination.view()).ok());
  ASSERT_TRUE(send->Wait(kLong).ok());
  ASSERT_TRUE(llm_transport_->Await(Tag(1), kLong).ok());
  EXPECT_EQ(destination.bytes, source.bytes);
}

TEST_P(GrpcTransportTest, ConcurrentSendsOfAStepAllArrive) {
  std::vector<Tensor> sources;
  std::vector<Tensor> destinations;
  std::vector<TransferTag> tags;
  sources.reserve(4);
  destinations.reserve(4);
  for (int k = 0; k < 4; ++k) {
    TransferTag tag = Tag(1);
    tag.micro_batch = k;
    tags.push_back(tag);
    sources.push_back(Pattern(DType::kFloat32, {2, 300, 1000}, k + 1));
    destinations.push_back(Zeros(DType::kFloat32, {2, 300, 1000}));
    ASSERT_TRUE(llm_transport_->Expect(tag, destinations.back().view()).ok());
  }
  std::vector<std::unique_ptr<SendHandle>> sends;
  for (int k = 0; k < 4; ++k)
    sends.push_back(vision_transport_->Send(0, tags[k], sources[k].view()));
  for (int k = 0; k < 4; ++k) {
    ASSERT_TRUE(sends[k]->Wait(kLong).ok());
    ASSERT_TRUE(llm_transport_->Await(tags[k], kLong).ok());
    EXPECT_EQ(destinations[k].bytes, sources[k].bytes) << "micro-batch " << k;
  }
}

TEST_P(GrpcTransportTest, MismatchedTransferIsInvalidArgumentAndTheNextOneSucceeds) {
  Tensor destination = Zeros(DType::kFloat32, {4, 8});
  Tensor good = Pattern(DType::kFloat32, {4, 8});
  Tensor other_dtype = Pattern(DType::kBFloat16, {4, 8});
  Tensor other_shape = Pattern(DType::kFloat32, {8, 4});
  struct Case {
    TransferTag tag;
    TensorBytes source;
    std::string message;
  };
  TensorBytes short_source = good.view();
  short_source.size = 124;
  const std::vector<Case> cases = {
      {Tag(1, TransferKind::kEmbeddings, "job-2"), good.view(),
       "job job-2, but the receiver's job is job-1"},
      {Tag(1), other_dtype.view(), "dtype bfloat16, but the receiver expects float32"},
      {Tag(1), other_shape.view(), "shape [8, 4], but the receiver expects [4, 8]"},
      {Tag(1), short_source, "total_bytes 124, but the receiver expects 128"},
  };
  ASSERT_TRUE(llm_transport_->Expect(Tag(1), destination.view()).ok());
  for (const Case& c : cases) {
    const absl::Status status = vision_transport_->Send(0, c.tag, c.source)->Wait(kLong);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
    EXPECT_THAT(status.message(), AllOf(HasSubstr("peer " + llm_.address()), HasSubstr(c.message)));
  }
  ASSERT_TRUE(vision_transport_->Send(0, Tag(1), good.view())->Wait(kLong).ok());
  ASSERT_TRUE(llm_transport_->Await(Tag(1), kLong).ok());
  EXPECT_EQ(destination.bytes, good.bytes);
}

TEST_P(GrpcTransportTest, SecondSendOfATransferIsAlreadyExists) {
  Tensor source = Pattern(DType::kFloat32, {4, 8});
  Tensor destination = Zeros(DType::kFloat32, {4, 8});
  ASSERT_TRUE(llm_transport_->Expect(Tag(1), destination.view()).ok());
  ASSERT_TRUE(vision_transport_->Send(0, Tag(1), source.view())->Wait(kLong).ok());
  const absl::Status status = vision_transport_->Send(0, Tag(1), source.view())->Wait(kLong);
  EXPECT_EQ(status.code(), absl::StatusCode::kAlreadyExists);
  EXPECT_THAT(status.message(), HasSubstr(DescribeTag(Tag(1))));
}

TEST_P(GrpcTransportTest, StaleTransferIsInvalidArgument) {
  Tensor source = Pattern(DType::kFloat32, {4, 8});
  Tensor destination = Zeros(DType::kFloat32, {4, 8});
  ASSERT_TRUE(llm_transport_->Expect(Tag(2), destination.view()).ok());
  const absl::Status status = vision_transport_->Send(0, Tag(1), source.view())->Wait(kLong);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("stale"));
}

TEST_P(GrpcTransportTest, AwaitDeadlineNamesTheTag) {
  Tensor destination = Zeros(DType::kFloat32, {4, 8});
  ASSERT_TRUE(llm_transport_->Expect(Tag(1), destination.view()).ok());
  const absl::Status status = llm_transport_->Await(Tag(1), 20ms);
  EXPECT_EQ(status.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(status.message(),
              AllOf(HasSubstr(DescribeTag(Tag(1))), HasSubstr("0 of 128 bytes arrived")));
}

TEST_P(GrpcTransportTest, ClearJobCancelsAWaitingAwait) {
  Tensor destination = Zeros(DType::kFloat32, {4, 8});
  const absl::Status status = AwaitThenCancel(
      [&] {
        llm_.inbox()->SetJob("job-1");
        return llm_transport_->Expect(Tag(1), destination.view());
      },
      [&] { return llm_transport_->Await(Tag(1), kLong); }, [&] { llm_.inbox()->ClearJob(); });
  EXPECT_EQ(status.code(), absl::StatusCode::kCancelled);
}

TEST_P(GrpcTransportTest, ResetCancelsAWaitingAwait) {
  Tensor destination = Zeros(DType::kFloat32, {4, 8});
  const absl::Status status = AwaitThenCancel(
      [&] { return llm_transport_->Expect(Tag(1), destination.view()); },
      [&] { return llm_transport_->Await(Tag(1), kLong); }, [&] { llm_transport_->Reset(); });
  EXPECT_EQ(status.code(), absl::StatusCode::kCancelled);
}

TEST_P(GrpcTransportTest, PeerRankOutsideTheGroupIsInvalidArgument) {
  Tensor source = Pattern(DType::kFloat32, {4, 8});
  const absl::Status status = vision_transport_->Send(1, Tag(1), source.view())->Wait(kLong);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("peer rank 1 outside [0, 1)"));
}

TEST_P(GrpcTransportTest, WaitGivesUpAfterItsTimeout) {
  Tensor source = Pattern(DType::kFloat32, {4, 8});
  std::unique_ptr<SendHandle> send =
      vision_transport_->Send(0, Tag(1), source.view());  // never expected
  const absl::Status status = send->Wait(50ms);
  EXPECT_EQ(status.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(status.message(),
              AllOf(HasSubstr("peer " + llm_.address()), HasSubstr(DescribeTag(Tag(1))),
                    HasSubstr("not acknowledged within 50 ms")));
  EXPECT_EQ(send->Wait(kLong), status);  // the outcome, again
}

TEST_P(GrpcTransportTest, ManySmallTransfersToOnePeerInFlightAtOnceAllArrive) {
  constexpr int kTransfers = 50;
  std::vector<Tensor> sources, destinations;
  std::vector<std::unique_ptr<SendHandle>> sends;
  sources.reserve(kTransfers);
  destinations.reserve(kTransfers);
  for (int k = 0; k < kTransfers; ++k) {
    TransferTag tag = Tag(1);
    tag.micro_batch = k;
    sources.push_back(Pattern(DType::kBFloat16, {16, 64}, k + 1));
    destinations.push_back(Zeros(DType::kBFloat16, {16, 64}));
    ASSERT_TRUE(llm_transport_->Expect(tag, destinations.back().view()).ok());
    sends.push_back(vision_transport_->Send(0, tag, sources.back().view()));
  }
  for (int k = 0; k < kTransfers; ++k) {
    TransferTag tag = Tag(1);
    tag.micro_batch = k;
    ASSERT_TRUE(sends[k]->Wait(kLong).ok()) << "micro-batch " << k;
    ASSERT_TRUE(llm_transport_->Await(tag, kLong).ok());
    EXPECT_EQ(destinations[k].bytes, sources[k].bytes) << "micro-batch " << k;
  }
  EXPECT_EQ(llm_.local_frames(), GetParam() ? kTransfers : 0);
}

TEST_P(GrpcTransportTest, ASendAfterThePeerRestartedOpensTheStreamAgain) {
  auto llm = std::make_unique<LoopbackPeer>(PeerServiceOptions{}, 0, GetParam());
  const int port = llm->port();
  std::unique_ptr<Transport> transport =
      CreateGrpcTransport(std::make_shared<Inbox>(), {llm->address()});
  Tensor source = Pattern(DType::kFloat32, {4, 8});
  Tensor destination = Zeros(DType::kFloat32, {4, 8});
  ASSERT_TRUE(llm->inbox()->Expect(Tag(1), destination.view()).ok());
  ASSERT_TRUE(transport->Send(0, Tag(1), source.view())->Wait(kLong).ok());

  llm.reset();  // the peer goes away: its stream breaks, and a send fails naming it
  const absl::Status lost = transport->Send(0, Tag(2), source.view())->Wait(kLong);
  EXPECT_FALSE(lost.ok());
  EXPECT_THAT(lost.message(), HasSubstr("peer 127.0.0.1:" + std::to_string(port)));

  // Back on the same address: sends fail fast (UNAVAILABLE) until the channel has reconnected,
  // within gRPC's first reconnect backoff (1 s), then go through on a new stream.
  llm = std::make_unique<LoopbackPeer>(PeerServiceOptions{}, port, GetParam());
  Tensor again = Zeros(DType::kFloat32, {4, 8});
  ASSERT_TRUE(llm->inbox()->Expect(Tag(3), again.view()).ok());
  absl::Status sent;
  for (const auto deadline = std::chrono::steady_clock::now() + 20s;
       std::chrono::steady_clock::now() < deadline;) {
    sent = transport->Send(0, Tag(3), source.view())->Wait(kLong);
    if (sent.code() != absl::StatusCode::kUnavailable) break;
  }
  ASSERT_TRUE(sent.ok()) << sent;
  ASSERT_TRUE(llm->inbox()->Await(Tag(3), kLong).ok());
  EXPECT_EQ(again.bytes, source.bytes);
}

INSTANTIATE_TEST_SUITE_P(Paths, GrpcTransportTest, ::testing::Values(false, true),
                         [](const ::testing::TestParamInfo<bool>& info) {
                           return info.param ? "LocalLinks" : "Grpc";
                         });

class GrpcTransportShortTimeoutTest : public GrpcTransportTest {
 protected:
  GrpcTransportShortTimeoutTest() : GrpcTransportTest(GrpcTransportOptions{.timeout = 200ms}) {}
};

TEST_P(GrpcTransportShortTimeoutTest, SendNeverExpectedIsDeadlineExceeded) {
  Tensor source = Pattern(DType::kFloat32, {4, 8});
  const absl::Status status = vision_transport_->Send(0, Tag(1), source.view())->Wait(kLong);
  EXPECT_EQ(status.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(status.message(),
              AllOf(HasSubstr("peer " + llm_.address()), HasSubstr(DescribeTag(Tag(1)))));
}

INSTANTIATE_TEST_SUITE_P(Paths, GrpcTransportShortTimeoutTest, ::testing::Values(false, true),
                         [](const ::testing::TestParamInfo<bool>& info) {
                           return info.param ? "LocalLinks" : "Grpc";
                         });

TEST(GrpcTransport, ALinkedPeerKeepsReceivingWhenItsGrpcServerIsGone) {
  LoopbackPeer llm(PeerServiceOptions{}, 0, /*local_links=*/true);
  std::unique_ptr<Transport> transport =
      CreateGrpcTransport(std::make_shared<Inbox>(), {llm.address()});
  Tensor source = Pattern(DType::kFloat32, {4, 8});
  Tensor first = Zeros(DType::kFloat32, {4, 8});
  ASSERT_TRUE(llm.inbox()->Expect(Tag(1), first.view()).ok());
  ASSERT_TRUE(transport->Send(0, Tag(1), source.view())->Wait(kLong).ok());

  llm.StopServer();  // only the local link is left: the next sends must take it
  Tensor second = Zeros(DType::kFloat32, {4, 8});
  Tensor large = Pattern(DType::kFloat32, {3, 1024, 1024}, 5);  // 12 MiB, written on a thread
  Tensor third = Zeros(DType::kFloat32, {3, 1024, 1024});
  ASSERT_TRUE(llm.inbox()->Expect(Tag(2), second.view()).ok());
  ASSERT_TRUE(llm.inbox()->Expect(Tag(3), third.view()).ok());
  std::unique_ptr<SendHandle> large_send = transport->Send(0, Tag(3), large.view());
  const absl::Status sent = transport->Send(0, Tag(2), source.view())->Wait(kLong);
  ASSERT_TRUE(sent.ok()) << sent;
  const absl::Status large_sent = large_send->Wait(kLong);
  ASSERT_TRUE(large_sent.ok()) << large_sent;
  ASSERT_TRUE(llm.inbox()->Await(Tag(2), kLong).ok());
  ASSERT_TRUE(llm.inbox()->Await(Tag(3), kLong).ok());
  EXPECT_EQ(second.bytes, source.bytes);
  EXPECT_EQ(third.bytes, large.bytes);
}

TEST(GrpcTransport, APeerWhoseLocalEndpointIsOutOfReachGetsGrpc) {
  // As when the peer runs in another network namespace: its socket name means nothing here.
  PeerServiceOptions options;
  options.local_endpoint = LocalEndpoint{"tandem-nowhere-0123456789abcdef", "0123456789abcdef"};
  LoopbackPeer llm(options);
  std::unique_ptr<Transport> transport =
      CreateGrpcTransport(std::make_shared<Inbox>(), {llm.address()});
  Tensor source = Pattern(DType::kFloat32, {4, 8});
  Tensor destination = Zeros(DType::kFloat32, {4, 8});
  ASSERT_TRUE(llm.inbox()->Expect(Tag(1), destination.view()).ok());
  const absl::Status sent = transport->Send(0, Tag(1), source.view())->Wait(kLong);
  ASSERT_TRUE(sent.ok()) << sent;
  ASSERT_TRUE(llm.inbox()->Await(Tag(1), kLong).ok());
  EXPECT_EQ(destination.bytes, source.bytes);
}

// A port bound to a socket that does not listen: connecting to it is refused.
class UnusedPort {
 public:
  UnusedPort() : fd_(socket(AF_INET, SOCK_STREAM, 0)) {
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t length = sizeof(address);
    EXPECT_EQ(bind(fd_, reinterpret_cast<sockaddr*>(&address), sizeof(address)), 0);
    EXPECT_EQ(getsockname(fd_, reinterpret_cast<sockaddr*>(&address), &length), 0);
    port_ = ntohs(address.sin_port);
  }
  ~UnusedPort() { close(fd_); }
  int port() const { return port_; }

 private:
  int fd_;
  int port_ = 0;
};

TEST(GrpcTransport, SendToAnAddressWhereNothingListensFailsWithinTheTimeout) {
  UnusedPort unused;
  const std::string address = "127.0.0.1:" + std::to_string(unused.port());
  std::unique_ptr<Transport> transport = CreateGrpcTransport(std::make_shared<Inbox>(), {address},
                                                             GrpcTransportOptions{.timeout = 10s});
  Tensor source = Pattern(DType::kFloat32, {4, 8});
  const auto start = std::chrono::steady_clock::now();
  const absl::Status status = transport->Send(0, Tag(1), source.view())->Wait(kLong);
  EXPECT_LT(std::chrono::steady_clock::now() - start, 10s);
  EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable) << status;
  EXPECT_THAT(status.message(), AllOf(HasSubstr("peer " + address), HasSubstr(DescribeTag(Tag(1))),
                                      HasSubstr("is it running and reachable?")));
}

}  // namespace
}  // namespace tandem::transport
