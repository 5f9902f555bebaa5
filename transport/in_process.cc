#include "transport/in_process.h"

#include <future>
#include <string_view>
#include <utility>

#include "absl/strings/str_cat.h"

namespace tandem::transport {
namespace {

// Delivers `source` into `inbox` as one chunk, waiting up to `wait` for the expectation.
absl::Status Deliver(Inbox& inbox, const TransferTag& tag, const TensorBytes& source,
                     std::chrono::milliseconds wait) {
  TransferHeader header;
  header.tag = tag;
  header.dtype = source.dtype;
  header.shape = source.shape;
  header.total_bytes = static_cast<int64_t>(source.size);
  absl::StatusOr<Inbox::Delivery> delivery = inbox.Begin(header, wait);
  if (!delivery.ok()) return delivery.status();
  absl::Status status = delivery->Write(
      tag, 0, std::string_view(reinterpret_cast<const char*>(source.data), source.size));
  if (!status.ok()) return status;
  return delivery->Finish().status();
}

class DoneSend : public SendHandle {
 public:
  explicit DoneSend(absl::Status status) : status_(std::move(status)) {}
  absl::Status Wait(std::chrono::milliseconds) override { return status_; }

 private:
  absl::Status status_;
};

class AsyncSend : public SendHandle {
 public:
  explicit AsyncSend(std::future<absl::Status> done) : done_(std::move(done)) {}
  ~AsyncSend() override {
    if (done_.valid()) done_.wait();
  }
  absl::Status Wait(std::chrono::milliseconds timeout) override {
    if (!done_.valid()) return result_;
    if (done_.wait_for(timeout) != std::future_status::ready) {
      return absl::DeadlineExceededError(
          absl::StrCat("an in-process send did not finish within ", timeout.count(), " ms"));
    }
    result_ = done_.get();
    return result_;
  }

 private:
  std::future<absl::Status> done_;
  absl::Status result_;
};

}  // namespace

class InProcessFabric::EndpointTransport : public Transport {
 public:
  EndpointTransport(std::shared_ptr<Inbox> inbox, std::vector<std::shared_ptr<Inbox>> peers,
                    std::chrono::milliseconds timeout)
      : inbox_(std::move(inbox)), peers_(std::move(peers)), timeout_(timeout) {}

  absl::Status Expect(const TransferTag& tag, TensorBytes destination) override {
    return inbox_->Expect(tag, std::move(destination));
  }
  absl::Status Await(const TransferTag& tag, std::chrono::milliseconds timeout) override {
    return inbox_->Await(tag, timeout);
  }
  std::unique_ptr<SendHandle> Send(int peer_rank, const TransferTag& tag,
                                   TensorBytes source) override {
    if (peer_rank < 0 || peer_rank >= static_cast<int>(peers_.size())) {
      return std::make_unique<DoneSend>(absl::InvalidArgumentError(
          absl::StrCat("sending ", DescribeTag(tag), ": peer rank ", peer_rank, " outside [0, ",
                       peers_.size(), ")")));
    }
    std::shared_ptr<Inbox> peer = peers_[peer_rank];
    absl::Status now = Deliver(*peer, tag, source, std::chrono::milliseconds(0));
    if (!absl::IsDeadlineExceeded(now)) return std::make_unique<DoneSend>(std::move(now));
    // Not expected yet: a thread of its own waits for the receiver, as a remote stream would.
    return std::make_unique<AsyncSend>(
        std::async(std::launch::async, [peer, tag, source = std::move(source), timeout = timeout_] {
          return Deliver(*peer, tag, source, timeout);
        }));
  }
  void Reset() override { inbox_->Reset(); }

 private:
  std::shared_ptr<Inbox> inbox_;
  std::vector<std::shared_ptr<Inbox>> peers_;
  std::chrono::milliseconds timeout_;
};

InProcessFabric::InProcessFabric(std::string transfer_key, int ranks0, int ranks1,
                                 std::chrono::milliseconds timeout)
    : transfer_key_(std::move(transfer_key)), timeout_(timeout), inboxes_(2) {
  for (int side = 0; side < 2; ++side) {
    for (int r = 0; r < (side == 0 ? ranks0 : ranks1); ++r) {
      inboxes_[side].push_back(std::make_shared<Inbox>());
      inboxes_[side].back()->SetJob(transfer_key_);
    }
  }
}

InProcessFabric::~InProcessFabric() = default;

std::shared_ptr<Transport> InProcessFabric::Endpoint(int side, int rank) {
  return std::make_shared<EndpointTransport>(inboxes_.at(side).at(rank), inboxes_.at(1 - side),
                                             timeout_);
}

void InProcessFabric::Abort() {
  for (auto& side : inboxes_) {
    for (auto& inbox : side) inbox->ClearJob();
  }
}

}  // namespace tandem::transport
