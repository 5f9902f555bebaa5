// Tests for transport/local_link.h and transport/local_listener.h without gRPC: a LocalListener on
// an inbox and LocalLinks connected to it in one process. Tensors land byte-exact, small and large;
// a refused transfer is acknowledged with the inbox's code and the link goes on; a wrong key, a
// garbage frame or a listener that went away fail clearly and hang nothing.
#include "transport/local_link.h"

#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstddef>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "proto/tandem/v1/peer.pb.h"
#include "tests/transport/transport_testing.h"
#include "transport/frame.h"
#include "transport/inbox.h"
#include "transport/local_listener.h"

namespace tandem::transport {
namespace {

using namespace std::chrono_literals;
using ::testing::HasSubstr;
using testing::Pattern;
using testing::Tag;
using testing::Tensor;
using testing::Zeros;

constexpr std::chrono::milliseconds kLong = std::chrono::minutes(1);

class LocalLinkTest : public ::testing::Test {
 protected:
  LocalLinkTest() : inbox_(std::make_shared<Inbox>()) {
    inbox_->SetJob("job-1");
    absl::StatusOr<std::unique_ptr<LocalListener>> listener = LocalListener::Start(inbox_);
    EXPECT_TRUE(listener.ok()) << listener.status();
    if (listener.ok()) listener_ = *std::move(listener);
  }
  ~LocalLinkTest() override {
    inbox_->ClearJob();
    if (listener_) listener_->Close();
  }

  std::shared_ptr<LocalLink> Connect() {
    absl::StatusOr<std::shared_ptr<LocalLink>> link =
        LocalLink::Connect(listener_->endpoint(), "test link");
    EXPECT_TRUE(link.ok()) << link.status();
    return link.ok() ? *link : nullptr;
  }

  // The listener still serves: a new link delivers a tensor byte-exact.
  void ExpectANewLinkCarriesATransfer() {
    std::shared_ptr<LocalLink> link = Connect();
    ASSERT_NE(link, nullptr);
    Tensor source = Pattern(DType::kFloat32, {4, 8});
    Tensor destination = Zeros(DType::kFloat32, {4, 8});
    ASSERT_TRUE(inbox_->Expect(Tag(1), destination.view()).ok());
    ASSERT_TRUE(link->Send("good", Tag(1), source.view(), kLong)->Wait(kLong).ok());
    ASSERT_TRUE(inbox_->Await(Tag(1), kLong).ok());
    EXPECT_EQ(destination.bytes, source.bytes);
  }

  std::shared_ptr<Inbox> inbox_;
  std::unique_ptr<LocalListener> listener_;
};

TEST_F(LocalLinkTest, SmallAndLargeTensorsArriveByteExact) {
  std::shared_ptr<LocalLink> link = Connect();
  ASSERT_NE(link, nullptr);
  Tensor small = Pattern(DType::kBFloat16, {4, 8});
  Tensor large = Pattern(DType::kFloat32, {5, 1000, 1000}, 3);  // 20 MB: threaded, read in pieces
  Tensor small_in = Zeros(DType::kBFloat16, {4, 8});
  Tensor large_in = Zeros(DType::kFloat32, {5, 1000, 1000});
  ASSERT_TRUE(inbox_->Expect(Tag(1), large_in.view()).ok());
  ASSERT_TRUE(inbox_->Expect(Tag(1, TransferKind::kGradients), small_in.view()).ok());
  std::unique_ptr<SendHandle> large_send = link->Send("large", Tag(1), large.view(), kLong);
  std::unique_ptr<SendHandle> small_send =
      link->Send("small", Tag(1, TransferKind::kGradients), small.view(), kLong);
  ASSERT_TRUE(large_send->Wait(kLong).ok());
  ASSERT_TRUE(small_send->Wait(kLong).ok());
  ASSERT_TRUE(inbox_->Await(Tag(1), kLong).ok());
  ASSERT_TRUE(inbox_->Await(Tag(1, TransferKind::kGradients), kLong).ok());
  EXPECT_EQ(large_in.bytes, large.bytes);
  EXPECT_EQ(small_in.bytes, small.bytes);
}

TEST_F(LocalLinkTest, LargeTensorsSentAheadArriveWhileTheReceiverExpectsThemOneByOne) {
  // Each large tensor has a connection of its own: one the receiver does not expect yet holds up
  // neither the others nor the small ones on the shared link.
  std::shared_ptr<LocalLink> link = Connect();
  ASSERT_NE(link, nullptr);
  ASSERT_LT(link->shared_bytes(), 2u << 20);
  std::vector<Tensor> sources, destinations;
  std::vector<std::unique_ptr<SendHandle>> sends;
  for (int k = 0; k < 3; ++k) {
    sources.push_back(Pattern(DType::kFloat32, {2, 1024, 256}, k + 1));  // 2 MiB
    destinations.push_back(Zeros(DType::kFloat32, {2, 1024, 256}));
  }
  for (int k = 2; k >= 0; --k) {  // sent last first
    TransferTag tag = Tag(1);
    tag.micro_batch = k;
    sends.push_back(link->Send("large", tag, sources[k].view(), kLong));
  }
  Tensor small = Pattern(DType::kFloat32, {4, 8});
  Tensor small_in = Zeros(DType::kFloat32, {4, 8});
  ASSERT_TRUE(inbox_->Expect(Tag(1, TransferKind::kGradients), small_in.view()).ok());
  ASSERT_TRUE(
      link->Send("small", Tag(1, TransferKind::kGradients), small.view(), kLong)->Wait(kLong).ok());
  for (int k = 0; k < 3; ++k) {  // expected and awaited first first
    TransferTag tag = Tag(1);
    tag.micro_batch = k;
    ASSERT_TRUE(inbox_->Expect(tag, destinations[k].view()).ok());
    const absl::Status arrived = inbox_->Await(tag, kLong);
    ASSERT_TRUE(arrived.ok()) << arrived;
    EXPECT_EQ(destinations[k].bytes, sources[k].bytes) << "micro-batch " << k;
  }
  for (auto& send : sends) EXPECT_TRUE(send->Wait(kLong).ok());
}

TEST_F(LocalLinkTest, ALargeSendThatTimesOutFailsAloneAndTheLinkGoesOn) {
  std::shared_ptr<LocalLink> link = Connect();
  ASSERT_NE(link, nullptr);
  Tensor large = Pattern(DType::kFloat32, {2, 1024, 256});
  std::unique_ptr<SendHandle> never = link->Send("never expected", Tag(1), large.view(), kLong);
  const absl::Status status = never->Wait(50ms);
  EXPECT_EQ(status.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(status.message(), HasSubstr("never expected: not acknowledged within 50 ms"));
  EXPECT_FALSE(link->broken());
  Tensor small = Pattern(DType::kFloat32, {4, 8});
  Tensor small_in = Zeros(DType::kFloat32, {4, 8});
  ASSERT_TRUE(inbox_->Expect(Tag(2), small_in.view()).ok());
  ASSERT_TRUE(link->Send("small", Tag(2), small.view(), kLong)->Wait(kLong).ok());
  EXPECT_EQ(small_in.bytes, small.bytes);
}

TEST_F(LocalLinkTest, ARefusedTransferIsAcknowledgedWithItsCodeAndTheLinkGoesOn) {
  std::shared_ptr<LocalLink> link = Connect();
  ASSERT_NE(link, nullptr);
  Tensor destination = Zeros(DType::kFloat32, {4, 8});
  Tensor wrong = Pattern(DType::kFloat32, {8, 4});
  Tensor large_wrong = Pattern(DType::kFloat32, {8, 1024, 256});  // 8 MiB to skip
  Tensor good = Pattern(DType::kFloat32, {4, 8}, 2);
  ASSERT_TRUE(inbox_->Expect(Tag(1), destination.view()).ok());
  absl::Status status = link->Send("wrong shape", Tag(1), wrong.view(), kLong)->Wait(kLong);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("shape [8, 4], but the receiver expects [4, 8]"));
  status = link->Send("large", Tag(1), large_wrong.view(), kLong)->Wait(kLong);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  status = link->Send("another job", Tag(1, TransferKind::kEmbeddings, "job-2"), good.view(), kLong)
               ->Wait(kLong);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("job job-2, but the receiver's job is job-1"));
  ASSERT_TRUE(link->Send("good", Tag(1), good.view(), kLong)->Wait(kLong).ok());
  ASSERT_TRUE(inbox_->Await(Tag(1), kLong).ok());
  EXPECT_EQ(destination.bytes, good.bytes);
  EXPECT_FALSE(link->broken());
}

TEST_F(LocalLinkTest, AWrongKeyIsUnauthenticatedAndTheListenerServesOthers) {
  LocalEndpoint forged = listener_->endpoint();
  forged.nonce[0] ^= 1;
  absl::StatusOr<std::shared_ptr<LocalLink>> refused = LocalLink::Connect(forged, "forged link");
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kUnauthenticated) << refused.status();
  EXPECT_THAT(refused.status().message(), HasSubstr("forged link"));

  ExpectANewLinkCarriesATransfer();
}

TEST_F(LocalLinkTest, NothingListeningIsNotFound) {
  const absl::StatusOr<std::shared_ptr<LocalLink>> link =
      LocalLink::Connect({"tandem-nowhere-0123456789abcdef", "x"}, "nowhere");
  EXPECT_EQ(link.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(link.status().message(), HasSubstr("nothing listens at @tandem-nowhere"));
}

TEST_F(LocalLinkTest, AGarbageFrameClosesOnlyThatConnection) {
  // A connection that presents the key, then writes a frame with a wrong magic number.
  const LocalEndpoint& endpoint = listener_->endpoint();
  sockaddr_un address;
  const absl::StatusOr<socklen_t> length = AbstractAddress(endpoint.socket_name, &address);
  ASSERT_TRUE(length.ok());
  UniqueFd fd(socket(AF_UNIX, SOCK_STREAM, 0));
  ASSERT_EQ(connect(fd.get(), reinterpret_cast<const sockaddr*>(&address), *length), 0);
  timeval ten_seconds{10, 0};  // a regression fails the test instead of hanging it
  setsockopt(fd.get(), SOL_SOCKET, SO_RCVTIMEO, &ten_seconds, sizeof(ten_seconds));
  ASSERT_TRUE(WriteFrame(fd.get(), FrameType::kHello, endpoint.nonce, nullptr, 0, "raw",
                         std::chrono::steady_clock::now() + kLong)
                  .ok());
  ASSERT_TRUE(ReadFrameHead(fd.get(), "raw").ok());  // the handshake's acknowledgement
  const char garbage[32] = "not a frame at all, just bytes";
  ASSERT_EQ(send(fd.get(), garbage, sizeof(garbage), MSG_NOSIGNAL), 32);
  char byte;
  EXPECT_EQ(recv(fd.get(), &byte, 1, 0), 0);  // the listener closed the connection

  ExpectANewLinkCarriesATransfer();
}

// A raw connection to `endpoint`, with a 10 s receive timeout so that a regression fails instead of
// hanging.
UniqueFd RawConnection(const LocalEndpoint& endpoint) {
  sockaddr_un address;
  const absl::StatusOr<socklen_t> length = AbstractAddress(endpoint.socket_name, &address);
  UniqueFd fd(socket(AF_UNIX, SOCK_STREAM, 0));
  if (!length.ok() || connect(fd.get(), reinterpret_cast<const sockaddr*>(&address), *length) != 0)
    return UniqueFd();
  timeval ten_seconds{10, 0};
  setsockopt(fd.get(), SOL_SOCKET, SO_RCVTIMEO, &ten_seconds, sizeof(ten_seconds));
  return fd;
}

// The bytes of a valid hello: a frame head and the key.
std::string HelloBytes(const LocalEndpoint& endpoint) {
  FrameHead head;
  head.magic = kFrameMagic;
  head.type = static_cast<uint32_t>(FrameType::kHello);
  head.meta_bytes = static_cast<uint32_t>(endpoint.nonce.size());
  return std::string(reinterpret_cast<const char*>(&head), sizeof head) + endpoint.nonce;
}

bool WaitFor(const std::function<bool()>& done, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!done()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(10ms);
  }
  return true;
}

// Every tensor over 1 MiB opens a connection of its own, so the caps apply back-pressure instead of
// refusing: beyond 16 connections in their handshake the next ones wait, unaccepted, and a silent
// one holds its slot only until its handshake deadline.
TEST_F(LocalLinkTest, ConnectionsBeyondThePendingHandshakeCapWaitTheirTurn) {
  listener_->Close();
  absl::StatusOr<std::unique_ptr<LocalListener>> listener =
      LocalListener::Start(inbox_, kLong, 500ms);
  ASSERT_TRUE(listener.ok()) << listener.status();
  listener_ = *std::move(listener);
  std::vector<UniqueFd> silent;
  for (int i = 0; i < kMaxPendingHandshakes + 24; ++i) {
    silent.push_back(RawConnection(listener_->endpoint()));
    ASSERT_GE(silent.back().get(), 0);
  }
  // Queued behind all 40: it connects once they have timed out, in waves of at most 16.
  ExpectANewLinkCarriesATransfer();
  EXPECT_EQ(listener_->peak_pending_handshakes(), kMaxPendingHandshakes);
  EXPECT_TRUE(WaitFor([&] { return listener_->refused() == kMaxPendingHandshakes + 24; }, 30s))
      << listener_->refused();
}

TEST(LocalListenerHandshake, OneDeadlineForTheWholeHandshakeHoweverTheBytesTrickle) {
  auto inbox = std::make_shared<Inbox>();
  absl::StatusOr<std::unique_ptr<LocalListener>> listener =
      LocalListener::Start(inbox, kLong, 300ms);
  ASSERT_TRUE(listener.ok()) << listener.status();
  UniqueFd fd = RawConnection((*listener)->endpoint());
  ASSERT_GE(fd.get(), 0);
  // The right key, a byte every 50 ms: each read is quick, the whole is 2 s. A timeout per read
  // would let it through.
  const std::string hello = HelloBytes((*listener)->endpoint());
  for (char byte : hello) {
    if (send(fd.get(), &byte, 1, MSG_NOSIGNAL) != 1) break;  // closed already
    std::this_thread::sleep_for(50ms);
  }
  absl::StatusOr<FrameHead> head = ReadFrameHead(fd.get(), "trickle");
  ASSERT_TRUE(head.ok()) << head.status();
  absl::StatusOr<std::string> meta = ReadFrameMeta(fd.get(), *head, "trickle");
  ASSERT_TRUE(meta.ok()) << meta.status();
  tandem::v1::TransferAck ack;
  ASSERT_TRUE(ack.ParseFromString(*meta));
  EXPECT_EQ(ack.code(), static_cast<int>(absl::StatusCode::kUnauthenticated));
  EXPECT_EQ((*listener)->refused(), 1);
  (*listener)->Close();
}

TEST_F(LocalLinkTest, AnotherUsersProcessIsClosedBeforeItsHandshake) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to connect as another user";
  const std::string hello = HelloBytes(listener_->endpoint());
  const LocalEndpoint endpoint = listener_->endpoint();
  const pid_t child = fork();
  if (child == 0) {  // only system calls from here
    if (setgid(65534) != 0 || setuid(65534) != 0) _exit(2);
    UniqueFd fd = RawConnection(endpoint);
    if (fd.get() < 0) _exit(3);
    (void)!send(fd.get(), hello.data(), hello.size(), MSG_NOSIGNAL);
    char byte;
    // Closed with no acknowledgement: an end of stream, or a reset (the hello was never read).
    const ssize_t n = recv(fd.get(), &byte, 1, 0);
    _exit(n == 0 || (n < 0 && errno == ECONNRESET) ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
  EXPECT_EQ(listener_->refused(), 1);

  ExpectANewLinkCarriesATransfer();
}

TEST_F(LocalLinkTest, PendingSendsFailWhenTheListenerGoesAway) {
  std::shared_ptr<LocalLink> link = Connect();
  ASSERT_NE(link, nullptr);
  Tensor source = Pattern(DType::kFloat32, {4, 8});
  std::unique_ptr<SendHandle> send = link->Send("never expected", Tag(1), source.view(), kLong);
  inbox_->ClearJob();  // the listener's thread, waiting for the expectation, answers and goes on
  EXPECT_EQ(send->Wait(kLong).code(), absl::StatusCode::kFailedPrecondition);
  std::unique_ptr<SendHandle> pending = link->Send("pending", Tag(2), source.view(), kLong);
  listener_->Close();
  const absl::Status status = pending->Wait(kLong);
  EXPECT_TRUE(status.code() == absl::StatusCode::kUnavailable ||
              status.code() == absl::StatusCode::kFailedPrecondition)
      << status;
  EXPECT_EQ(link->Send("after", Tag(3), source.view(), kLong)->Wait(kLong).code(),
            absl::StatusCode::kUnavailable);
  EXPECT_TRUE(link->broken());
}

}  // namespace
}  // namespace tandem::transport
