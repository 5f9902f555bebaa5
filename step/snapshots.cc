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

constexpr int64_t kSizeTransfer = 0, kBytesTransfer = 1;  // a snapshot transfer's micro-batch
constexpr size_t kOwnKept = 2;                            // own snapshots a rank keeps

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
  std::vector<const engine::CheckpointSnapshot*> snapshots(placement_.group_size, nullptr);
  snapshots[placement_.rank] = &snapshot;
  ASSIGN_OR_RETURN(const auto client_state, engine_->RestoreSnapshots(snapshots));
  ASSIGN_OR_RETURN(const ResumePoint resume, ParseCheckpointClientState(client_state, what));
  RETURN_IF_ERROR(SeekData(resume));
  return resume;
}

HeldSnapshots Stage::TakeHeldSnapshots() {
  FinishSnapshotExchange(/*harvest=*/true).IgnoreError();
  return std::exchange(held_, HeldSnapshots{});
}

}  // namespace tandem::step
