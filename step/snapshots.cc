// NOTE [Snapshots in memory] in stage.h: a rank's state kept in its own and its buddy's memory.
#include <torch/torch.h>

#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "engine/engine.h"
#include "step/stage.h"

namespace tandem::step {

using transport::TransferKind;
using transport::TransferTag;

namespace {

// A snapshot transfer's micro-batch: its size and its bytes, to a buddy after a step, or at a
// restart to the rank whose state it is.
constexpr int64_t kSizeTransfer = 0, kBytesTransfer = 1, kRestoreSize = 2, kRestoreBytes = 3;
constexpr size_t kOwnKept = 2;  // own snapshots a rank keeps

// The bytes of `text` as a uint8 tensor that does not own them.
at::Tensor BytesTensor(std::string& text) {
  return torch::from_blob(text.data(), {static_cast<int64_t>(text.size())}, at::kByte);
}

}  // namespace

std::vector<int> Stage::SnapshotSources() const {
  std::vector<int> sources;
  for (int peer = placement_.rank; peer < placement_.peer_group_size;
       peer += placement_.group_size) {
    sources.push_back(peer);
  }
  return sources;
}

absl::Status Stage::TakeMemorySnapshot(int64_t step) {
  RETURN_IF_ERROR(FinishSnapshotExchange(/*harvest=*/false));
  SetPhase("snapshot");
  ASSIGN_OR_RETURN(engine::CheckpointSnapshot snapshot,
                   engine_->SnapshotCheckpoint(CheckpointClientState(step, sampler_.position())));
  ASSIGN_OR_RETURN(std::string bytes, engine::EncodeCheckpointSnapshot(snapshot));
  snapshot = {};
  held_.own[step] = std::move(bytes);
  while (held_.own.size() > kOwnKept) held_.own.erase(held_.own.begin());
  std::string& own = held_.own[step];

  auto exchange = std::make_unique<SnapshotExchange>();
  exchange->step = step;
  exchange->size = torch::full({1}, static_cast<double>(own.size()), at::kDouble);
  const int buddy = placement_.rank % placement_.peer_group_size;
  const auto tag = [&](int64_t part, int64_t count, int source) {
    return Tag(TransferKind::kSnapshot, step, part, SampleRange{0, count}, source);
  };
  ASSIGN_OR_RETURN(auto size_send,
                   Send(buddy, tag(kSizeTransfer, 1, placement_.rank), exchange->size, nullptr));
  exchange->sends.push_back(std::move(size_send));
  const auto count = static_cast<int64_t>(own.size());
  ASSIGN_OR_RETURN(auto bytes_send, Send(buddy, tag(kBytesTransfer, count, placement_.rank),
                                         BytesTensor(own), nullptr));
  exchange->sends.push_back(std::move(bytes_send));
  // The copies this rank is the buddy for: their sizes now (their ranks end the same step), their
  // bytes while the next step trains.
  SetPhase("transfer");
  for (const int source : SnapshotSources()) {
    at::Tensor size = at::zeros({1}, at::kDouble);
    const TransferTag size_tag = tag(kSizeTransfer, 1, source);
    RETURN_IF_ERROR(Expect(size_tag, size));
    RETURN_IF_ERROR(Await(size_tag));
    const auto incoming_size = static_cast<int64_t>(size.item<double>());
    SnapshotExchange::Incoming& incoming = exchange->incoming.emplace_back();
    incoming.source = source;
    incoming.tag = tag(kBytesTransfer, incoming_size, source);
    incoming.bytes.resize(static_cast<size_t>(incoming_size));
  }
  for (SnapshotExchange::Incoming& incoming : exchange->incoming)
    RETURN_IF_ERROR(Expect(incoming.tag, BytesTensor(incoming.bytes)));
  exchange_ = std::move(exchange);
  SetPhase("idle");
  return absl::OkStatus();
}

absl::Status Stage::FinishSnapshotExchange(bool harvest) {
  if (!exchange_) return absl::OkStatus();
  std::unique_ptr<SnapshotExchange> exchange = std::move(exchange_);
  absl::Status status;
  for (SnapshotExchange::Incoming& incoming : exchange->incoming) {
    const absl::Status arrived = harvest
                                     ? transport_->Await(incoming.tag, std::chrono::milliseconds(0))
                                     : Await(incoming.tag);
    if (arrived.ok()) {
      held_.copies[incoming.source] = {exchange->step, std::move(incoming.bytes)};
    } else if (!harvest) {
      status.Update(arrived);
    }
  }
  if (!harvest) status.Update(WaitSends(exchange->sends));
  return status;
}

absl::StatusOr<ResumePoint> Stage::RestoreSnapshot(std::string_view bytes,
                                                   const std::string& what) {
  ASSIGN_OR_RETURN(const engine::CheckpointSnapshot snapshot,
                   engine::DecodeCheckpointSnapshot(bytes, what));
  // The engine's group: with tensor or sequence parallelism, one rank of every replica.
  std::vector<const engine::CheckpointSnapshot*> snapshots(engine_->world_size(), nullptr);
  snapshots[engine_->rank()] = &snapshot;
  ASSIGN_OR_RETURN(const auto client_state, engine_->RestoreSnapshots(snapshots));
  ASSIGN_OR_RETURN(const ResumePoint resume, ParseCheckpointClientState(client_state, what));
  RETURN_IF_ERROR(SeekData(resume));
  return resume;
}

void Stage::RestoreFromMemoryAtNextStep(int64_t step, HeldSnapshots held, int from_peer,
                                        std::vector<int> send_to) {
  pending_restore_ = std::make_unique<PendingRestore>(
      PendingRestore{step, std::move(held), from_peer, std::move(send_to)});
  step_ = step;
}

absl::Status Stage::RestoreFromMemory(PendingRestore restore) {
  SetPhase("snapshot");
  const int64_t step = restore.step;
  const char* other = RoleName(role_ == Role::kVision ? Role::kLlm : Role::kVision);
  const auto tag = [&](int64_t part, int64_t count, int source) {
    return Tag(TransferKind::kSnapshot, step, part, SampleRange{0, count}, source);
  };
  // The copies this rank held for ranks of the other group that lost theirs go first.
  std::vector<at::Tensor> sizes;
  std::vector<std::unique_ptr<transport::SendHandle>> sends;
  for (const int peer : restore.send_to) {
    auto copy = restore.held.copies.find(peer);
    if (copy == restore.held.copies.end() || copy->second.first != step) {
      return absl::FailedPreconditionError(absl::StrCat(group(), " rank ", placement_.rank,
                                                        " holds no copy of ", other, " rank ", peer,
                                                        "'s state of step ", step, " to send it"));
    }
    std::string& bytes = copy->second.second;
    sizes.push_back(torch::full({1}, static_cast<double>(bytes.size()), at::kDouble));
    ASSIGN_OR_RETURN(auto size_send,
                     Send(peer, tag(kRestoreSize, 1, placement_.rank), sizes.back(), nullptr));
    sends.push_back(std::move(size_send));
    ASSIGN_OR_RETURN(
        auto bytes_send,
        Send(peer, tag(kRestoreBytes, static_cast<int64_t>(bytes.size()), placement_.rank),
             BytesTensor(bytes), nullptr));
    sends.push_back(std::move(bytes_send));
  }
  std::string state;
  std::string what;
  if (restore.from_peer < 0) {
    auto own = restore.held.own.find(step);
    if (own == restore.held.own.end()) {
      return absl::FailedPreconditionError(
          absl::StrCat(group(), " rank ", placement_.rank, " keeps no snapshot of step ", step));
    }
    state = std::move(own->second);
    what = absl::StrCat("its snapshot of step ", step, " in memory");
  } else {
    SetPhase("transfer");
    at::Tensor size = at::zeros({1}, at::kDouble);
    const TransferTag size_tag = tag(kRestoreSize, 1, restore.from_peer);
    RETURN_IF_ERROR(Expect(size_tag, size));
    RETURN_IF_ERROR(Await(size_tag));
    state.resize(static_cast<size_t>(size.item<double>()));
    const TransferTag bytes_tag =
        tag(kRestoreBytes, static_cast<int64_t>(state.size()), restore.from_peer);
    RETURN_IF_ERROR(Expect(bytes_tag, BytesTensor(state)));
    RETURN_IF_ERROR(Await(bytes_tag));
    what = absl::StrCat("the copy of its state of step ", step, " from ", other, " rank ",
                        restore.from_peer);
  }
  SetPhase("snapshot");
  ASSIGN_OR_RETURN(const ResumePoint resume, RestoreSnapshot(state, what));
  if (resume.step != step) {
    return absl::DataLossError(absl::StrCat(what, " is of step ", resume.step));
  }
  RETURN_IF_ERROR(WaitSends(sends));
  // What stays true of the run: the snapshots up to `step` (a later one belongs to the steps the
  // failure undid).
  held_ = {};
  for (auto& [taken, bytes] : restore.held.own) {
    if (taken < step) held_.own[taken] = std::move(bytes);
  }
  held_.own[step] = std::move(state);
  for (auto& [rank, copy] : restore.held.copies) {
    if (copy.first <= step) held_.copies[rank] = std::move(copy);
  }
  SetPhase("idle");
  return absl::OkStatus();
}

HeldSnapshots Stage::TakeHeldSnapshots() {
  // A restore that never ran keeps what it would have restored from.
  if (pending_restore_) return std::move(std::exchange(pending_restore_, nullptr)->held);
  FinishSnapshotExchange(/*harvest=*/true).IgnoreError();
  return std::exchange(held_, HeldSnapshots{});
}

}  // namespace tandem::step
