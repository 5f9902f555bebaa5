#include "transport/inbox.h"

#include <cstring>
#include <tuple>
#include <utility>

#include "absl/strings/str_cat.h"

namespace tandem::transport {
namespace {

using Clock = std::chrono::steady_clock;

int64_t ElementCount(const std::vector<int64_t>& shape) {
  int64_t count = 1;
  for (int64_t dim : shape) count *= dim;
  return count;
}

bool HasNegativeDim(const std::vector<int64_t>& shape) {
  for (int64_t dim : shape) {
    if (dim < 0) return true;
  }
  return false;
}

}  // namespace

// One expected transfer (NOTE [Expectation states]).
struct Inbox::Slot {
  TransferTag tag;
  TensorBytes destination;
  int64_t received = 0;  // bytes of the current delivery written so far
  bool claimed = false;  // a Delivery is receiving it
  bool writing = false;  // a chunk is being copied into `destination` outside the lock
  bool complete = false;
  absl::Status withdrawn;  // OK while expected; what its sender is told once withdrawn

  int64_t total() const { return static_cast<int64_t>(destination.size); }
  // What a delivery in progress is told once the slot is withdrawn.
  absl::Status WithdrawnError() const {
    return absl::Status(withdrawn.code(),
                        absl::StrCat(DescribeTag(tag), ": ", withdrawn.message(), " after ",
                                     received, " of ", total(), " bytes"));
  }
};

bool Inbox::TagLess::operator()(const TransferTag& a, const TransferTag& b) const {
  return std::tie(a.job_id, a.kind, a.step, a.micro_batch, a.sample_begin, a.sample_end,
                  a.source_rank) < std::tie(b.job_id, b.kind, b.step, b.micro_batch, b.sample_begin,
                                            b.sample_end, b.source_rank);
}

Inbox::Inbox() = default;
Inbox::~Inbox() = default;

void Inbox::SetJob(std::string job_id) {
  std::unique_lock lock(mu_);
  WithdrawAllLocked(
      lock, absl::FailedPreconditionError(absl::StrCat("the receiver moved to job ", job_id)));
  job_ = std::move(job_id);
  received_.clear();
  newest_step_.clear();
}

void Inbox::ClearJob() {
  std::unique_lock lock(mu_);
  WithdrawAllLocked(lock, absl::FailedPreconditionError("the receiver's job was released"));
  job_.reset();
  received_.clear();
  newest_step_.clear();
}

void Inbox::Reset() {
  std::unique_lock lock(mu_);
  WithdrawAllLocked(lock, absl::CancelledError("the receiver reset its transfers"));
}

absl::Status Inbox::CheckJobLocked(const TransferTag& tag) const {
  if (!job_) {
    return absl::FailedPreconditionError(
        absl::StrCat(DescribeTag(tag), ": the receiver has no job"));
  }
  if (tag.job_id != *job_) {
    return absl::InvalidArgumentError(absl::StrCat(DescribeTag(tag), ": job ", tag.job_id,
                                                   ", but the receiver's job is ", *job_));
  }
  return absl::OkStatus();
}

absl::Status Inbox::Expect(const TransferTag& tag, TensorBytes destination) {
  const std::string what = DescribeTag(tag);
  if (HasNegativeDim(destination.shape) ||
      static_cast<size_t>(ElementCount(destination.shape)) * DTypeSize(destination.dtype) !=
          destination.size) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": destination of ", destination.size,
                                                   " bytes for ", DTypeName(destination.dtype), " ",
                                                   ShapeString(destination.shape)));
  }
  if (destination.data == nullptr && destination.size > 0) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": destination has no data"));
  }
  std::unique_lock lock(mu_);
  if (absl::Status status = CheckJobLocked(tag); !status.ok()) return status;
  if (expected_.count(tag) > 0)
    return absl::InvalidArgumentError(absl::StrCat(what, " is already expected"));
  auto slot = std::make_shared<Slot>();
  slot->tag = tag;
  slot->destination = std::move(destination);
  expected_.emplace(tag, std::move(slot));
  received_.erase(tag);
  auto [newest, inserted] = newest_step_.emplace(tag.kind, tag.step);
  if (!inserted && tag.step > newest->second) {
    newest->second = tag.step;
    std::erase_if(received_,
                  [&](const TransferTag& t) { return t.kind == tag.kind && t.step < tag.step; });
  }
  changed_.notify_all();
  return absl::OkStatus();
}

absl::Status Inbox::Await(const TransferTag& tag, std::chrono::milliseconds timeout) {
  const std::string what = DescribeTag(tag);
  std::unique_lock lock(mu_);
  auto it = expected_.find(tag);
  if (it == expected_.end()) {
    return absl::NotFoundError(received_.count(tag) > 0 ? absl::StrCat(what, " was already awaited")
                                                        : absl::StrCat(what, " is not expected"));
  }
  std::shared_ptr<Slot> slot = it->second;
  changed_.wait_until(lock, Clock::now() + timeout,
                      [&] { return slot->complete || !slot->withdrawn.ok(); });
  if (!slot->withdrawn.ok()) {
    return absl::CancelledError(
        absl::StrCat("stopped waiting for ", what, ": ", slot->withdrawn.message()));
  }
  expected_.erase(tag);
  if (slot->complete) {
    received_.insert(tag);
    return absl::OkStatus();
  }
  const std::string arrived =
      absl::StrCat(slot->received, " of ", slot->total(), " bytes arrived",
                   slot->claimed ? " (a stream is delivering it)" : " (no stream started it)");
  WithdrawLocked(lock, {slot}, absl::CancelledError("the receiver stopped waiting for it"));
  return absl::DeadlineExceededError(
      absl::StrCat("timed out after ", timeout.count(), " ms waiting for ", what, ": ", arrived));
}

bool Inbox::Ready(const TransferTag& tag) {
  std::lock_guard lock(mu_);
  auto it = expected_.find(tag);
  return it == expected_.end() || it->second->complete || !it->second->withdrawn.ok();
}

absl::StatusOr<Inbox::Delivery> Inbox::Begin(const TransferHeader& header,
                                             std::chrono::milliseconds wait) {
  const TransferTag& tag = header.tag;
  const auto deadline = Clock::now() + wait;
  std::unique_lock lock(mu_);
  for (;;) {
    if (absl::Status status = CheckJobLocked(tag); !status.ok()) return status;
    if (received_.count(tag) > 0) {
      return absl::AlreadyExistsError(
          absl::StrCat(DescribeTag(tag), " was already received completely"));
    }
    if (auto it = expected_.find(tag); it != expected_.end()) {
      Slot& slot = *it->second;
      if (slot.complete) {
        return absl::AlreadyExistsError(
            absl::StrCat(DescribeTag(tag), " was already received completely"));
      }
      if (slot.claimed) {
        return absl::AlreadyExistsError(
            absl::StrCat(DescribeTag(tag), " is being received by another stream"));
      }
      const TensorBytes& want = slot.destination;
      if (header.dtype != want.dtype) {
        return absl::InvalidArgumentError(
            absl::StrCat(DescribeTag(tag), ": dtype ", DTypeName(header.dtype),
                         ", but the receiver expects ", DTypeName(want.dtype)));
      }
      if (header.shape != want.shape) {
        return absl::InvalidArgumentError(
            absl::StrCat(DescribeTag(tag), ": shape ", ShapeString(header.shape),
                         ", but the receiver expects ", ShapeString(want.shape)));
      }
      if (header.total_bytes != slot.total()) {
        return absl::InvalidArgumentError(
            absl::StrCat(DescribeTag(tag), ": total_bytes ", header.total_bytes,
                         ", but the receiver expects ", slot.total()));
      }
      slot.claimed = true;
      slot.received = 0;
      return Delivery(this, it->second);
    }
    if (auto newest = newest_step_.find(tag.kind);
        newest != newest_step_.end() && tag.step < newest->second) {
      return absl::InvalidArgumentError(
          absl::StrCat(DescribeTag(tag), " is stale: the receiver expects ",
                       TransferKindName(tag.kind), " of step ", newest->second));
    }
    if (Clock::now() >= deadline) {
      return absl::DeadlineExceededError(absl::StrCat(
          "the receiver did not expect ", DescribeTag(tag), " within ", wait.count(), " ms"));
    }
    changed_.wait_until(lock, deadline);
  }
}

void Inbox::WithdrawLocked(std::unique_lock<std::mutex>& lock,
                           const std::vector<std::shared_ptr<Slot>>& slots,
                           const absl::Status& reason) {
  for (const auto& slot : slots) slot->withdrawn = reason;
  changed_.notify_all();
  changed_.wait(lock, [&] {
    for (const auto& slot : slots) {
      if (slot->writing) return false;
    }
    return true;
  });
}

void Inbox::WithdrawAllLocked(std::unique_lock<std::mutex>& lock, const absl::Status& reason) {
  std::vector<std::shared_ptr<Slot>> slots;
  for (auto& [tag, slot] : expected_) slots.push_back(std::move(slot));
  expected_.clear();
  WithdrawLocked(lock, slots, reason);
}

absl::Status Inbox::Write(Delivery& delivery, const TransferTag& tag, int64_t offset,
                          std::string_view bytes) {
  Slot& slot = *delivery.slot_;
  std::unique_lock lock(mu_);
  absl::Status refused;
  if (!slot.withdrawn.ok()) {
    refused = slot.WithdrawnError();
  } else if (tag != slot.tag) {
    refused = absl::InvalidArgumentError(
        absl::StrCat("a chunk of ", DescribeTag(tag), " in the stream of ", DescribeTag(slot.tag)));
  } else if (offset != slot.received) {
    refused = absl::InvalidArgumentError(absl::StrCat(DescribeTag(slot.tag), ": chunk at offset ",
                                                      offset, ", but ", slot.received,
                                                      " bytes were received so far"));
  } else if (static_cast<int64_t>(bytes.size()) > slot.total() - offset) {
    refused = absl::InvalidArgumentError(
        absl::StrCat(DescribeTag(slot.tag), ": chunk of ", bytes.size(), " bytes at offset ",
                     offset, " runs past the end (", slot.total(), " bytes)"));
  }
  if (!refused.ok()) {
    slot.claimed = false;
    slot.received = 0;
    delivery.slot_.reset();
    return refused;
  }
  slot.writing = true;
  lock.unlock();
  if (!bytes.empty()) std::memcpy(slot.destination.data + offset, bytes.data(), bytes.size());
  lock.lock();
  slot.writing = false;
  if (!slot.withdrawn.ok()) {
    changed_.notify_all();  // a withdrawer waits for this write
    absl::Status status = slot.WithdrawnError();
    delivery.slot_.reset();
    return status;
  }
  slot.received += static_cast<int64_t>(bytes.size());
  return absl::OkStatus();
}

absl::StatusOr<int64_t> Inbox::Finish(Delivery& delivery) {
  std::shared_ptr<Slot> slot = std::move(delivery.slot_);
  std::unique_lock lock(mu_);
  if (!slot->withdrawn.ok()) return slot->WithdrawnError();
  if (slot->received < slot->total()) {
    const int64_t received = slot->received;
    slot->claimed = false;
    slot->received = 0;
    return absl::InvalidArgumentError(absl::StrCat(DescribeTag(slot->tag),
                                                   ": the stream ended after ", received, " of ",
                                                   slot->total(), " bytes"));
  }
  slot->complete = true;
  changed_.notify_all();
  return slot->received;
}

void Inbox::Abandon(Slot& slot) {
  std::lock_guard lock(mu_);
  slot.claimed = false;
  slot.received = 0;
}

Inbox::Delivery::Delivery(Inbox* inbox, std::shared_ptr<Slot> slot)
    : inbox_(inbox), slot_(std::move(slot)) {}

Inbox::Delivery::Delivery(Delivery&& other) noexcept
    : inbox_(other.inbox_), slot_(std::move(other.slot_)) {}

Inbox::Delivery& Inbox::Delivery::operator=(Delivery&& other) noexcept {
  if (this != &other) {
    if (slot_) inbox_->Abandon(*slot_);
    inbox_ = other.inbox_;
    slot_ = std::move(other.slot_);
  }
  return *this;
}

Inbox::Delivery::~Delivery() {
  if (slot_) inbox_->Abandon(*slot_);
}

absl::Status Inbox::Delivery::Write(const TransferTag& tag, int64_t offset,
                                    std::string_view bytes) {
  if (!slot_) return absl::FailedPreconditionError("the delivery has ended");
  return inbox_->Write(*this, tag, offset, bytes);
}

absl::StatusOr<int64_t> Inbox::Delivery::Finish() {
  if (!slot_) return absl::FailedPreconditionError("the delivery has ended");
  return inbox_->Finish(*this);
}

}  // namespace tandem::transport
