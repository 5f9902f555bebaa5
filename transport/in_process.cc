#include "transport/in_process.h"

#include <condition_variable>
#include <mutex>
#include <string_view>
#include <thread>
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

using Clock = std::chrono::steady_clock;

// Calls `yield` until `ready` or `timeout` passed; returns at once without a yield function.
template <typename Ready>
void PollWith(const std::function<void()>& yield, std::chrono::milliseconds timeout, Ready ready) {
  if (!yield) return;
  const auto deadline = Clock::now() + timeout;
  while (!ready() && Clock::now() < deadline) yield();
}

// A send delivered by a detached thread of its own from a copy of the source, so neither the
// sender's tensor nor the handle has to outlive it: a rank that fails drops its handles at once,
// and Abort ends a delivery still waiting for its expectation.
class AsyncSend : public SendHandle {
 public:
  AsyncSend(std::shared_ptr<Inbox> peer, const TransferTag& tag, const TensorBytes& source,
            std::chrono::milliseconds wait, std::function<void()> yield)
      : state_(std::make_shared<State>()), yield_(std::move(yield)) {
    auto copy = std::make_shared<std::vector<std::byte>>(source.data, source.data + source.size);
    TensorBytes bytes = source;
    bytes.data = copy->data();
    std::thread([state = state_, peer = std::move(peer), tag, bytes, copy, wait] {
      absl::Status status = Deliver(*peer, tag, bytes, wait);
      std::lock_guard<std::mutex> lock(state->mu);
      state->result = std::move(status);
      state->done = true;
      state->changed.notify_all();
    }).detach();
  }

  absl::Status Wait(std::chrono::milliseconds timeout) override {
    PollWith(yield_, timeout, [this] {
      std::lock_guard<std::mutex> lock(state_->mu);
      return state_->done;
    });
    std::unique_lock<std::mutex> lock(state_->mu);
    if (!state_->changed.wait_for(lock, yield_ ? std::chrono::milliseconds(0) : timeout,
                                  [this] { return state_->done; })) {
      return absl::DeadlineExceededError(
          absl::StrCat("an in-process send did not finish within ", timeout.count(), " ms"));
    }
    return state_->result;
  }

 private:
  struct State {
    std::mutex mu;
    std::condition_variable changed;
    bool done = false;
    absl::Status result;
  };
  std::shared_ptr<State> state_;
  std::function<void()> yield_;
};

}  // namespace

class InProcessFabric::EndpointTransport : public Transport {
 public:
  EndpointTransport(std::shared_ptr<Inbox> inbox, std::vector<std::shared_ptr<Inbox>> peers,
                    std::chrono::milliseconds timeout, std::function<void()> yield)
      : inbox_(std::move(inbox)),
        peers_(std::move(peers)),
        timeout_(timeout),
        yield_(std::move(yield)) {}

  absl::Status Expect(const TransferTag& tag, TensorBytes destination) override {
    return inbox_->Expect(tag, std::move(destination));
  }
  absl::Status Await(const TransferTag& tag, std::chrono::milliseconds timeout) override {
    PollWith(yield_, timeout, [&] { return inbox_->Ready(tag); });
    return inbox_->Await(tag, yield_ ? std::chrono::milliseconds(0) : timeout);
  }
  std::unique_ptr<SendHandle> Send(int peer_rank, const TransferTag& tag,
                                   TensorBytes source) override {
    if (peer_rank < 0 || peer_rank >= static_cast<int>(peers_.size())) {
      return std::make_unique<DoneSend>(
          absl::InvalidArgumentError(absl::StrCat("sending ", DescribeTag(tag), ": peer rank ",
                                                  peer_rank, " outside [0, ", peers_.size(), ")")));
    }
    std::shared_ptr<Inbox> peer = peers_[peer_rank];
    absl::Status now = Deliver(*peer, tag, source, std::chrono::milliseconds(0));
    if (!absl::IsDeadlineExceeded(now)) return std::make_unique<DoneSend>(std::move(now));
    // Not expected yet: a thread of its own waits for the receiver, as a remote stream would.
    return std::make_unique<AsyncSend>(std::move(peer), tag, source, timeout_, yield_);
  }
  void Reset() override { inbox_->Reset(); }

 private:
  std::shared_ptr<Inbox> inbox_;
  std::vector<std::shared_ptr<Inbox>> peers_;
  std::chrono::milliseconds timeout_;
  std::function<void()> yield_;
};

InProcessFabric::InProcessFabric(std::string transfer_key, int ranks0, int ranks1,
                                 std::chrono::milliseconds timeout, std::function<void()> yield)
    : transfer_key_(std::move(transfer_key)),
      timeout_(timeout),
      yield_(std::move(yield)),
      inboxes_(2) {
  for (int side = 0; side < 2; ++side) {
    for (int r = 0; r < (side == 0 ? ranks0 : ranks1); ++r) {
      inboxes_[side].push_back(std::make_shared<Inbox>());
      inboxes_[side].back()->SetJob(transfer_key_);
    }
  }
}

InProcessFabric::~InProcessFabric() { Abort(); }  // ends deliveries still waiting

std::shared_ptr<Transport> InProcessFabric::Endpoint(int side, int rank) {
  return std::make_shared<EndpointTransport>(inboxes_.at(side).at(rank), inboxes_.at(1 - side),
                                             timeout_, yield_);
}

void InProcessFabric::Abort() {
  for (auto& side : inboxes_) {
    for (auto& inbox : side) inbox->ClearJob();
  }
}

}  // namespace tandem::transport
