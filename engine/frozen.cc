// Frozen parameters: held, gathered, checkpointed and exported, never trained.
//
// NOTE [Frozen parameters]
// A parameter with requires_grad false (a pretrained tower that stays fixed, say) is no part of the
// Layout: it has no unit, no gradient buffer, no master, no moments, no hook and no reduction, and
// its bytes are reported apart from the model state (MemoryReport::frozen_bytes). At Create each is
// broadcast from rank 0 (in fp32) and stored in the parameter dtype, so every rank computes with
// the same weights at the same precision as the trainable ones. Below stage 3, and outside
// BlockModules at stage 3, each rank holds it whole. At stage 3 the frozen parameters of a block
// are one flat unit of their own (a FrozenUnit), padded and split across the group like a trainable
// unit and all-gathered together with the block's trainable unit in GatherBlock, then released.
// A checkpoint holds them once, in <directory>/frozen.safetensors, written by rank 0 in the
// parameter dtype with the list of their names and shapes; a load checks that list against the
// model before anything changes.
#include <ATen/ATen.h>

#include <algorithm>
#include <filesystem>
#include <mutex>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "engine/checkpoint_format.h"
#include "engine/engine.h"
#include "engine/safetensors.h"

namespace tandem::engine {
namespace {

int64_t Numel(const std::vector<int64_t>& shape) {
  int64_t numel = 1;
  for (int64_t d : shape) numel *= d;
  return numel;
}

std::string ShapeText(const std::vector<int64_t>& shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}

}  // namespace

absl::Status Engine::InitializeFrozen(const std::map<const void*, int>& block_of) {
  const auto options = at::TensorOptions().device(device_);
  frozen_units_.assign(blocks_.size(), FrozenUnit{});
  frozen_gathered_.assign(blocks_.size(), at::Tensor());
  for (size_t i = 0; i < frozen_.size(); ++i) {
    auto block = block_of.find(frozen_[i].unsafeGetTensorImpl());
    if (config_.zero.stage == 3 && block != block_of.end()) {
      FrozenUnit& unit = frozen_units_[block->second];
      unit.params.push_back(static_cast<int>(i));
      unit.offsets.push_back(unit.numel);
      unit.numel += frozen_[i].numel();
      continue;
    }
    at::Tensor value = frozen_[i].detach().to(at::kFloat).contiguous();
    RETURN_IF_ERROR(Wait(communicator_->Broadcast(value.view({-1}), 0)));
    frozen_[i].set_data(value.to(param_dtype_));
  }
  const int world = world_size();
  int64_t shard_elements = 0;
  for (FrozenUnit& unit : frozen_units_) {
    if (unit.numel == 0) continue;
    unit.padded = (unit.numel + world - 1) / world * world;
    unit.shard = unit.padded / world;
    unit.shard_offset = shard_elements;
    shard_elements += unit.shard;
  }
  frozen_shards_ = at::zeros({shard_elements}, options.dtype(param_dtype_));
  for (FrozenUnit& unit : frozen_units_) {
    if (unit.numel == 0) continue;
    at::Tensor init = at::zeros({unit.padded}, options.dtype(at::kFloat));
    for (size_t k = 0; k < unit.params.size(); ++k) {
      const at::Tensor& p = frozen_[unit.params[k]];
      init.narrow(0, unit.offsets[k], p.numel()).copy_(p.detach().reshape(-1));
    }
    RETURN_IF_ERROR(Wait(communicator_->Broadcast(init, 0)));
    frozen_shards_.narrow(0, unit.shard_offset, unit.shard)
        .copy_(init.narrow(0, rank() * unit.shard, unit.shard));
    for (int index : unit.params)
      frozen_[index].set_data(at::empty({0}, options.dtype(param_dtype_)));
  }
  return absl::OkStatus();
}

int64_t Engine::frozen_parameters() const {
  int64_t total = 0;
  for (const auto& shape : frozen_shapes_) total += Numel(shape);
  return total;
}

int64_t Engine::FrozenBytes() const {
  int64_t bytes = frozen_shards_.defined() ? frozen_shards_.nbytes() : 0;
  for (size_t i = 0; i < frozen_.size(); ++i) {
    if (!IsShardedFrozen(static_cast<int>(i))) bytes += frozen_[i].nbytes();
  }
  return bytes;
}

bool Engine::IsShardedFrozen(int index) const {
  for (const FrozenUnit& unit : frozen_units_) {
    if (std::find(unit.params.begin(), unit.params.end(), index) != unit.params.end()) return true;
  }
  return false;
}

absl::Status Engine::GatherFrozenBlock(int block_id) {
  if (frozen_units_.empty() || frozen_units_[block_id].numel == 0) return absl::OkStatus();
  const FrozenUnit& unit = frozen_units_[block_id];
  at::Tensor full = at::empty({unit.padded}, frozen_shards_.options());
  RETURN_IF_ERROR(Wait(
      communicator_->AllGather(frozen_shards_.narrow(0, unit.shard_offset, unit.shard), full)));
  frozen_gathered_[block_id] = full;
  for (size_t k = 0; k < unit.params.size(); ++k) {
    const int index = unit.params[k];
    frozen_[index].set_data(
        full.narrow(0, unit.offsets[k], Numel(frozen_shapes_[index])).view(frozen_shapes_[index]));
  }
  return absl::OkStatus();
}

void Engine::ReleaseFrozenBlock(int block_id) {
  if (frozen_units_.empty() || frozen_units_[block_id].numel == 0) return;
  for (int index : frozen_units_[block_id].params) {
    frozen_[index].set_data(at::empty({0}, frozen_shards_.options()));
  }
  frozen_gathered_[block_id] = at::Tensor();
}

absl::StatusOr<NamedTensors> Engine::GatherFrozenParameters() {
  if (reducer_->in_backward())
    return absl::FailedPreconditionError("engine: gather during backward");
  std::vector<at::Tensor> values(frozen_.size());
  try {
    for (size_t b = 0; b < frozen_units_.size(); ++b) {
      const FrozenUnit& unit = frozen_units_[b];
      if (unit.numel == 0) continue;
      at::Tensor full = at::empty({unit.padded}, frozen_shards_.options());
      RETURN_IF_ERROR(Wait(
          communicator_->AllGather(frozen_shards_.narrow(0, unit.shard_offset, unit.shard), full)));
      for (size_t k = 0; k < unit.params.size(); ++k) {
        const int index = unit.params[k];
        values[index] = full.narrow(0, unit.offsets[k], Numel(frozen_shapes_[index]))
                            .view(frozen_shapes_[index]);
      }
    }
    NamedTensors named;
    for (size_t i = 0; i < frozen_.size(); ++i) {
      const at::Tensor& value = values[i].defined() ? values[i] : frozen_[i].detach();
      named.emplace_back(frozen_names_[i], value.to(at::kCPU, at::kFloat).clone());
    }
    return named;
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("engine: gathering frozen parameters: ", e.what()));
  }
}

absl::Status Engine::SnapshotFrozen(CheckpointSnapshot& snapshot) {
  if (frozen_.empty()) return absl::OkStatus();
  ASSIGN_OR_RETURN(NamedTensors named, GatherFrozenParameters());
  if (rank() != 0) return absl::OkStatus();
  std::vector<std::string> manifest;
  for (auto& [name, value] : named) {
    manifest.push_back(absl::StrCat(name, " ", ShapeText(value.sizes().vec())));
    value = value.to(param_dtype_);  // gathered into a tensor of its own
  }
  snapshot.frozen = std::move(named);
  snapshot.frozen_metadata = {{"format", "pt"},
                              {"frozen_parameters", absl::StrJoin(manifest, "\n")}};
  return absl::OkStatus();
}

absl::Status Engine::CheckFrozen(const NamedTensors& values, const std::string& where) const {
  if (values.size() != frozen_.size()) {
    return absl::FailedPreconditionError(
        absl::StrCat("checkpoint: ", where, " holds ", values.size(),
                     " frozen parameters, this engine has ", frozen_.size()));
  }
  for (size_t i = 0; i < frozen_.size(); ++i) {
    if (values[i].first != frozen_names_[i] ||
        values[i].second.sizes().vec() != frozen_shapes_[i]) {
      return absl::FailedPreconditionError(
          absl::StrCat("checkpoint: ", where, ": frozen parameter ", i, " is ", values[i].first,
                       " ", ShapeText(values[i].second.sizes().vec()), ", this engine has ",
                       frozen_names_[i], " ", ShapeText(frozen_shapes_[i])));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<NamedTensors> Engine::ReadFrozen(const std::string& directory) const {
  if (frozen_.empty()) return NamedTensors{};
  const std::string path = directory + "/" + kCheckpointFrozenFile;
  if (!std::filesystem::exists(path)) {
    // Checkpoints written before frozen parameters were saved: the trainable manifest matched,
    // so the frozen ones keep the values this engine was created with.
    TANDEM_LOG(kWarning, "engine")
        << "checkpoint: " << path << " is missing: the " << frozen_.size()
        << " frozen parameters (the first is " << frozen_names_[0] << ") keep their current values";
    return NamedTensors{};
  }
  ASSIGN_OR_RETURN(SafetensorsHeader header, ReadSafetensorsHeader(path));
  for (size_t i = 0; i < frozen_.size(); ++i) {
    const SafetensorsEntry* entry = header.Find(frozen_names_[i]);
    if (entry == nullptr || entry->shape != frozen_shapes_[i]) {
      return absl::FailedPreconditionError(absl::StrCat(
          "checkpoint: ", path, ": frozen parameter ", frozen_names_[i], " ",
          ShapeText(frozen_shapes_[i]), " is ",
          entry == nullptr ? std::string("absent") : ShapeText(entry->shape),
          " there (a checkpoint loads only into the same model with the same parameters frozen)"));
    }
  }
  if (header.tensors.size() != frozen_.size()) {
    return absl::FailedPreconditionError(
        absl::StrCat("checkpoint: ", path, " holds ", header.tensors.size(),
                     " frozen parameters, this engine has ", frozen_.size(),
                     " (a checkpoint loads only into the same model with the same parameters "
                     "frozen)"));
  }
  NamedTensors values;
  for (size_t i = 0; i < frozen_.size(); ++i) {
    ASSIGN_OR_RETURN(at::Tensor value, ReadSafetensor(header, frozen_names_[i]));
    values.emplace_back(frozen_names_[i], std::move(value));
  }
  return values;
}

void Engine::RestoreFrozen(const NamedTensors& values) {
  if (values.empty()) return;
  std::vector<const at::Tensor*> by_index(frozen_.size(), nullptr);
  for (size_t i = 0; i < values.size() && i < frozen_.size(); ++i) by_index[i] = &values[i].second;
  for (size_t i = 0; i < frozen_.size(); ++i) {
    if (by_index[i] != nullptr && !IsShardedFrozen(static_cast<int>(i))) {
      frozen_[i].detach().copy_(by_index[i]->view(frozen_shapes_[i]));
    }
  }
  for (const FrozenUnit& unit : frozen_units_) {
    if (unit.numel == 0) continue;
    at::Tensor full = at::zeros({unit.padded}, at::kFloat);
    for (size_t k = 0; k < unit.params.size(); ++k) {
      full.narrow(0, unit.offsets[k], Numel(frozen_shapes_[unit.params[k]]))
          .copy_(by_index[unit.params[k]]->reshape(-1));
    }
    frozen_shards_.narrow(0, unit.shard_offset, unit.shard)
        .copy_(full.narrow(0, rank() * unit.shard, unit.shard));
  }
}

}  // namespace tandem::engine
