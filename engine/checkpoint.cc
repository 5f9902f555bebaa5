// Engine::SaveCheckpoint / LoadCheckpoint.
//
// A checkpoint directory holds one shard per rank, "rank_<r>_of_<w>.safetensors", with this rank's
// optimizer domain (NOTE [Units] in layout.h): "weights" (param dtype), "master", "exp_avg",
// "exp_avg_sq", "compensation" (those present), "rng_state" (the CPU generator), and metadata (step
// counts, stage, precision, layout sizes, and the caller's client state under "client."). Each
// shard is written atomically (temp, fsync, rename). After a barrier, rank 0 writes the "complete"
// marker last: a directory without it is an interrupted save and is refused by LoadCheckpoint.
// Frozen parameters are not in the shards: rank 0 writes them whole to "frozen.safetensors" before
// the marker (NOTE [Frozen parameters] in frozen.cc).
//
// NOTE [Re-partitioning on load]
// Every saved tensor but rng_state is the concatenation, over the saved group's units, of the
// rank's domain of that unit: the whole padded unit at stage 0, its chunk [r*shard, (r+1)*shard) at
// stages 1-3. Units hold consecutive parameters in named_parameters() order with padding only at
// their end, so the real elements of all units in order are the model's parameters, flattened and
// concatenated. The metadata records what rebuilds the saved layout: world_size, zero_stage and
// "unit_elements" (the real element count of each unit, comma-separated).
//
// LoadCheckpoint takes the saved world size from the "complete" marker. If this engine's layout is
// the saved one (same world size, stage, units and domain size), each rank reads its own shard
// only. Otherwise it re-partitions: every shard of the saved group must be present and agree with
// rank 0's metadata; for each tensor name in turn, the pieces of the saved domains that overlap
// this rank's new domain are copied into a zeroed CPU buffer of the new domain's size (so padding
// reads zero), which then replaces the engine's buffer. A saved stage-0 group is replicated: only
// rank 0's shard is read. Each rank thus reads up to the whole model's state, but holds at most one
// saved tensor and one buffer of its own domain at a time. The RNG state is this rank's own if the
// saved group had this rank, else rank 0's; step counts and client state come from rank 0's shard.
// Precision, the parameter count and the parameters' names, shapes and dtypes ("parameters", one
// line each) must match (FailedPrecondition otherwise, naming the first parameter that differs).
// All headers are checked before the engine changes; only a shard that changes on disk during the
// load can leave it partly loaded. If gradient_accumulation_steps changed, the micro step count is
// rescaled so that the next micro-batch starts a new accumulation.
#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include <algorithm>
#include <filesystem>
#include <mutex>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/atomic_file.h"
#include "common/status_macros.h"
#include "engine/checkpoint_format.h"
#include "engine/engine.h"
#include "engine/safetensors.h"
#include "nlohmann/json.hpp"

namespace tandem::engine {
namespace {

using Metadata = std::map<std::string, std::string>;

constexpr char kClientPrefix[] = "client.";
// Metadata every shard of one save holds with the same value (or all leave out).
constexpr const char* kGroupKeys[] = {"world_size",
                                      "zero_stage",
                                      "precision",
                                      "num_parameters",
                                      "unit_elements",
                                      "domain_elements",
                                      "gradient_accumulation_steps",
                                      "global_steps",
                                      "micro_steps",
                                      "skipped_steps"};

std::string PrecisionName(const Config& config) {
  if (!config.bf16_enabled) return "fp32";
  return absl::StrCat("bf16",
                      config.bf16_master_weights_and_grads ? "+bf16_master" : "+fp32_master",
                      config.bf16_optimizer_states ? "+bf16_states" : "+fp32_states");
}

std::vector<int64_t> UnitNumels(const Layout& layout) {
  std::vector<int64_t> elements;
  for (const Unit& unit : layout.units()) elements.push_back(unit.numel);
  return elements;
}

std::string UnitElements(const Layout& layout) { return absl::StrJoin(UnitNumels(layout), ","); }

// The model's parameters as a checkpoint records them ("parameters"): one line each, in order,
// "<name> [<shape>] <dtype>", so a model of the same size but other names, shapes or dtypes is
// refused instead of loaded scrambled.
std::vector<std::string> ParameterManifest(const Layout& layout, at::ScalarType dtype) {
  std::vector<std::string> lines;
  for (const ParamSpec& param : layout.params()) {
    lines.push_back(absl::StrCat(param.name, " [", absl::StrJoin(param.shape, ", "), "] ",
                                 c10::toString(dtype)));
  }
  return lines;
}

// OK when `saved` (a shard's "parameters") lists `mine`; else FailedPrecondition naming the first
// parameter that differs.
absl::Status CheckParameterManifest(const std::string& path, const std::string& saved,
                                    const std::vector<std::string>& mine) {
  const std::vector<std::string> theirs = absl::StrSplit(saved, '\n', absl::SkipEmpty());
  for (size_t i = 0; i < std::max(theirs.size(), mine.size()); ++i) {
    const std::string saved_one = i < theirs.size() ? theirs[i] : "absent";
    const std::string mine_one = i < mine.size() ? mine[i] : "absent";
    if (saved_one == mine_one) continue;
    return absl::FailedPreconditionError(absl::StrCat(
        "checkpoint: ", path, ": parameter ", i, " is ", saved_one, ", this engine has ", mine_one,
        " (a checkpoint loads only into the same model and precision)"));
  }
  return absl::OkStatus();
}

using ShardHeader = SafetensorsHeader;

// InvalidArgument unless the shard holds `name` as `numel` elements of `type`.
absl::Status CheckTensor(const ShardHeader& shard, const std::string& name, at::ScalarType type,
                         int64_t numel) {
  const SafetensorsEntry* entry = shard.Find(name);
  if (entry == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("checkpoint: ", shard.path, ": tensor '", name, "' missing"));
  }
  if (entry->dtype != type || entry->numel() != numel) {
    return absl::InvalidArgumentError(absl::StrCat("checkpoint: ", shard.path, ": tensor '", name,
                                                   "' has the wrong size or dtype"));
  }
  return absl::OkStatus();
}

}  // namespace

// A saved rank's shard: its header (tensor names, dtypes and shapes, and the metadata; `path` names
// it in messages) and, for a snapshot in memory, the tensors themselves.
struct CheckpointShard {
  ShardHeader header;
  const NamedTensors* memory = nullptr;
};

// Where Engine::Load reads a saved group's state: a checkpoint directory, or snapshots in memory.
struct CheckpointSource {
  std::string name;  // in messages: "checkpoint: <name>: ..."
  int saved_world = 0;
  std::function<absl::StatusOr<CheckpointShard>(int saved_rank)> shard;
  // The frozen parameters to restore (none: they keep their values).
  std::function<absl::StatusOr<NamedTensors>()> frozen;
};

namespace {

// Reads one tensor of a shard (checked by CheckTensor) as a flat CPU tensor; from memory, a view
// of the snapshot's own, which the restore only reads.
absl::StatusOr<at::Tensor> ReadShardTensor(const CheckpointShard& shard, const std::string& name) {
  if (shard.memory != nullptr) {
    for (const auto& [saved, tensor] : *shard.memory) {
      if (saved == name) return tensor.reshape({-1});
    }
    return absl::NotFoundError(
        absl::StrCat("checkpoint: ", shard.header.path, ": no tensor '", name, "'"));
  }
  ASSIGN_OR_RETURN(at::Tensor tensor, ReadSafetensor(shard.header, name));
  return tensor.view({-1});
}

// A snapshot as a shard: its header made from its tensors.
CheckpointShard MemoryShard(const CheckpointSnapshot& snapshot, const std::string& where) {
  CheckpointShard shard;
  shard.header.path = absl::StrCat(where, ", ", snapshot.shard);
  shard.header.metadata = snapshot.metadata;
  for (const auto& [name, tensor] : snapshot.tensors) {
    SafetensorsEntry entry;
    entry.name = name;
    entry.dtype = tensor.scalar_type();
    entry.shape = tensor.sizes().vec();
    entry.end = static_cast<uint64_t>(tensor.numel() * tensor.element_size());
    shard.header.tensors.push_back(std::move(entry));
  }
  shard.memory = &snapshot.tensors;
  return shard;
}

// One copy from a saved domain tensor into this rank's new domain.
struct Piece {
  int64_t source = 0;
  int64_t target = 0;
  int64_t length = 0;
};

// The overlaps of two segment lists, each sorted by `global`.
std::vector<Piece> Overlap(const std::vector<DomainSegment>& source,
                           const std::vector<DomainSegment>& target) {
  std::vector<Piece> pieces;
  size_t i = 0, j = 0;
  while (i < source.size() && j < target.size()) {
    const DomainSegment& s = source[i];
    const DomainSegment& t = target[j];
    const int64_t begin = std::max(s.global, t.global);
    const int64_t end = std::min(s.global + s.length, t.global + t.length);
    if (begin < end) {
      pieces.push_back({s.local + begin - s.global, t.local + begin - t.global, end - begin});
    }
    if (s.global + s.length <= t.global + t.length) {
      ++i;
    } else {
      ++j;
    }
  }
  return pieces;
}

}  // namespace

int64_t CheckpointSnapshot::bytes() const {
  int64_t total = 0;
  for (const auto& [name, tensor] : tensors) total += tensor.numel() * tensor.element_size();
  for (const auto& [name, tensor] : frozen) total += tensor.numel() * tensor.element_size();
  return total;
}

absl::Status WriteCheckpointSnapshot(const CheckpointSnapshot& snapshot,
                                     const std::string& directory) {
  std::error_code ec;
  std::filesystem::create_directories(directory, ec);
  if (ec) {
    return absl::InternalError(
        absl::StrCat("checkpoint: cannot create ", directory, ": ", ec.message()));
  }
  RETURN_IF_ERROR(
      WriteSafetensors(directory + "/" + snapshot.shard, snapshot.tensors, snapshot.metadata));
  if (snapshot.frozen.empty()) return absl::OkStatus();
  return WriteSafetensors(directory + "/" + kCheckpointFrozenFile, snapshot.frozen,
                          snapshot.frozen_metadata);
}

namespace {

// How EncodeCheckpointSnapshot keeps what is not the shard's own tensors and metadata.
constexpr char kFrozenPrefix[] = "frozen/";  // no tensor of a shard has a '/'
constexpr char kSnapshotShardKey[] = "tandem.snapshot.shard";
constexpr char kSnapshotMarkerKey[] = "tandem.snapshot.marker";
constexpr char kSnapshotFrozenKey[] = "tandem.snapshot.frozen_metadata";

}  // namespace

absl::StatusOr<std::string> EncodeCheckpointSnapshot(const CheckpointSnapshot& snapshot) {
  NamedTensors tensors = snapshot.tensors;
  for (const auto& [name, tensor] : snapshot.frozen)
    tensors.emplace_back(kFrozenPrefix + name, tensor);
  std::map<std::string, std::string> metadata = snapshot.metadata;
  metadata[kSnapshotShardKey] = snapshot.shard;
  if (!snapshot.marker.empty()) metadata[kSnapshotMarkerKey] = snapshot.marker;
  if (!snapshot.frozen_metadata.empty()) {
    metadata[kSnapshotFrozenKey] = nlohmann::json(snapshot.frozen_metadata).dump();
  }
  return EncodeSafetensors(snapshot.shard, tensors, metadata);
}

absl::StatusOr<CheckpointSnapshot> DecodeCheckpointSnapshot(std::string_view bytes,
                                                            const std::string& what) {
  ASSIGN_OR_RETURN(DecodedSafetensors decoded, DecodeSafetensors(what, bytes));
  CheckpointSnapshot snapshot;
  const auto take = [&](const char* key) {
    std::string value;
    if (auto it = decoded.metadata.find(key); it != decoded.metadata.end()) {
      value = std::move(it->second);
      decoded.metadata.erase(it);
    }
    return value;
  };
  snapshot.shard = take(kSnapshotShardKey);
  if (snapshot.shard.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("checkpoint: ", what, " is not a checkpoint snapshot (no shard name)"));
  }
  snapshot.marker = take(kSnapshotMarkerKey);
  if (const std::string frozen = take(kSnapshotFrozenKey); !frozen.empty()) {
    const nlohmann::json parsed =
        nlohmann::json::parse(frozen, nullptr, /*allow_exceptions=*/false);
    if (!parsed.is_object()) {
      return absl::InvalidArgumentError(
          absl::StrCat("checkpoint: ", what, ": ", kSnapshotFrozenKey, " is not a JSON object"));
    }
    for (const auto& [key, value] : parsed.items()) {
      if (!value.is_string()) {
        return absl::InvalidArgumentError(
            absl::StrCat("checkpoint: ", what, ": ", kSnapshotFrozenKey, " holds a non-string"));
      }
      snapshot.frozen_metadata[key] = value.get<std::string>();
    }
  }
  snapshot.metadata = std::move(decoded.metadata);
  for (auto& [name, tensor] : decoded.tensors) {
    if (name.rfind(kFrozenPrefix, 0) == 0) {
      snapshot.frozen.emplace_back(name.substr(sizeof(kFrozenPrefix) - 1), std::move(tensor));
    } else {
      snapshot.tensors.emplace_back(std::move(name), std::move(tensor));
    }
  }
  return snapshot;
}

absl::Status Engine::SaveCheckpoint(const std::string& directory,
                                    const std::map<std::string, std::string>& client_state) {
  absl::StatusOr<CheckpointSnapshot> snapshot = TakeSnapshot(client_state, /*copy=*/false, {});
  if (!snapshot.ok()) {
    return absl::Status(snapshot.status().code(),
                        absl::StrCat(snapshot.status().message(), " (saving ", directory, ")"));
  }
  RETURN_IF_ERROR(WriteCheckpointSnapshot(*snapshot, directory));
  return CompleteCheckpoint(*snapshot, directory);
}

absl::StatusOr<CheckpointSnapshot> Engine::SnapshotCheckpoint(
    const std::map<std::string, std::string>& client_state, CheckpointSnapshot reuse) {
  return TakeSnapshot(client_state, /*copy=*/true, std::move(reuse));
}

absl::StatusOr<CheckpointSnapshot> Engine::TakeSnapshot(
    const std::map<std::string, std::string>& client_state, bool copy, CheckpointSnapshot reuse) {
  if (reducer_->in_backward())
    return absl::FailedPreconditionError("checkpoint: called during backward");
  if (absl::Status error = reducer_->error(); !error.ok()) return error;
  if (micro_steps_ % config_.gradient_accumulation_steps != 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "checkpoint: save at an accumulation boundary (micro step ", micro_steps_.load(),
        " is inside a step of ", config_.gradient_accumulation_steps, " micro-batches)"));
  }
  CheckpointSnapshot snapshot;
  snapshot.shard = CheckpointShardName(rank(), world_size());
  // Copies of their own (a CPU engine's buffers would otherwise be written as they change), into
  // the reused snapshot's tensors where they fit.
  const auto target = [&](const std::string& name, at::IntArrayRef sizes, at::ScalarType dtype,
                          bool from_device) {
    for (auto& [reused_name, tensor] : reuse.tensors) {
      if (reused_name == name && tensor.defined() && tensor.sizes() == sizes &&
          tensor.scalar_type() == dtype)
        return std::exchange(tensor, at::Tensor());
    }
    return at::empty(sizes, at::TensorOptions().dtype(dtype).pinned_memory(from_device));
  };
  const auto host = [&](const std::string& name, const at::Tensor& t) {
    if (!copy) return t.cpu();
    return target(name, t.sizes(), t.scalar_type(), t.is_cuda()).copy_(t);
  };
  NamedTensors& tensors = snapshot.tensors;
  try {
    std::vector<at::Tensor> weights;
    for (size_t u = 0; u < layout_.units().size(); ++u) weights.push_back(UnitWeights(u));
    // A wholly frozen model has no units (its weights are in frozen.safetensors).
    at::Tensor whole;
    if (weights.empty()) {
      whole = at::empty({0}, at::TensorOptions().dtype(param_dtype_));
    } else if (weights.front().is_cpu() && copy) {
      int64_t elements = 0;
      for (const at::Tensor& w : weights) elements += w.numel();
      whole = target("weights", {elements}, weights.front().scalar_type(), false);
      at::cat_out(whole, weights, 0);
    } else {
      whole = host("weights", at::cat(weights));
    }
    tensors.emplace_back("weights", whole);
    if (master_.defined()) tensors.emplace_back("master", host("master", master_));
    tensors.emplace_back("exp_avg", host("exp_avg", exp_avg_));
    tensors.emplace_back("exp_avg_sq", host("exp_avg_sq", exp_avg_sq_));
    if (compensation_.defined())
      tensors.emplace_back("compensation", host("compensation", compensation_));
    auto generator = at::detail::getDefaultCPUGenerator();
    {
      std::lock_guard<std::mutex> lock(generator.mutex());
      tensors.emplace_back("rng_state", generator.get_state());
    }
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("checkpoint: ", e.what()));
  }
  snapshot.metadata = {
      {"global_steps", std::to_string(global_steps_)},
      {"micro_steps", std::to_string(micro_steps_.load())},
      {"skipped_steps", std::to_string(skipped_steps_)},
      {"gradient_accumulation_steps", std::to_string(config_.gradient_accumulation_steps)},
      {"zero_stage", std::to_string(config_.zero.stage)},
      {"world_size", std::to_string(world_size())},
      {"precision", PrecisionName(config_)},
      {"num_parameters", std::to_string(layout_.num_elements())},
      {"unit_elements", UnitElements(layout_)},
      {"domain_elements", std::to_string(domain_elements_)},
      {"parameters", absl::StrJoin(ParameterManifest(layout_, param_dtype_), "\n")},
  };
  for (const auto& [key, value] : client_state) snapshot.metadata[kClientPrefix + key] = value;
  RETURN_IF_ERROR(SnapshotFrozen(snapshot));
  if (rank() == 0) {
    snapshot.marker =
        absl::StrCat("{\"global_steps\": ", global_steps_, ", \"world_size\": ", world_size(),
                     ", \"zero_stage\": ", config_.zero.stage, "}\n");
  }
  return snapshot;
}

absl::Status Engine::CompleteCheckpoint(const CheckpointSnapshot& snapshot,
                                        const std::string& directory) {
  RETURN_IF_ERROR(Wait(communicator_->Barrier()));
  if (rank() == 0) {
    RETURN_IF_ERROR(
        WriteFileAtomically(directory + "/" + kCheckpointCompleteMarker, snapshot.marker));
  }
  return Wait(communicator_->Barrier());
}

absl::StatusOr<std::map<std::string, std::string>> Engine::LoadCheckpoint(
    const std::string& directory) {
  const std::string marker = directory + "/" + kCheckpointCompleteMarker;
  if (!std::filesystem::exists(marker)) {
    return absl::FailedPreconditionError(absl::StrCat("checkpoint: ", directory,
                                                      " is incomplete or missing (no '",
                                                      kCheckpointCompleteMarker, "' marker)"));
  }
  CheckpointSource source;
  source.name = directory;
  ASSIGN_OR_RETURN(source.saved_world, SavedWorldSize(marker));
  const int saved_world = source.saved_world;
  source.shard = [&](int saved_rank) -> absl::StatusOr<CheckpointShard> {
    const std::string path = directory + "/" + CheckpointShardName(saved_rank, saved_world);
    if (!std::filesystem::exists(path)) {
      return absl::FailedPreconditionError(absl::StrCat(
          "checkpoint: ", path, " is missing (the checkpoint was written by a group of ",
          saved_world, " ranks and needs the shard of each)"));
    }
    ASSIGN_OR_RETURN(ShardHeader header, ReadSafetensorsHeader(path));
    return CheckpointShard{std::move(header)};
  };
  source.frozen = [&] { return ReadFrozen(directory); };
  return Load(source);
}

absl::StatusOr<std::map<std::string, std::string>> Engine::RestoreSnapshots(
    const std::vector<const CheckpointSnapshot*>& snapshots) {
  CheckpointSource source;
  source.name = "the snapshot in memory";
  source.saved_world = static_cast<int>(snapshots.size());
  source.shard = [&](int saved_rank) -> absl::StatusOr<CheckpointShard> {
    const CheckpointSnapshot* snapshot = snapshots.at(saved_rank);
    if (snapshot == nullptr) {
      return absl::FailedPreconditionError(
          absl::StrCat("checkpoint: the snapshot in memory of rank ", saved_rank, " of ",
                       snapshots.size(), " is not here, and this rank needs it"));
    }
    return MemoryShard(*snapshot, source.name);
  };
  source.frozen = [&]() -> absl::StatusOr<NamedTensors> {
    // Rank 0's snapshot holds them whole; elsewhere they keep their values (they never change).
    const CheckpointSnapshot* first = snapshots.empty() ? nullptr : snapshots[0];
    if (first == nullptr || first->frozen.empty()) return NamedTensors{};
    RETURN_IF_ERROR(CheckFrozen(first->frozen, source.name));
    return first->frozen;
  };
  return Load(source);
}

absl::StatusOr<std::map<std::string, std::string>> Engine::Load(const CheckpointSource& source) {
  const int saved_world = source.saved_world;
  if (saved_world < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("checkpoint: ", source.name, ": saved by a group of ", saved_world, " ranks"));
  }
  auto read_header = [&](int saved_rank) { return source.shard(saved_rank); };
  auto same = [](const CheckpointShard& shard, const std::string& key, const std::string& want) {
    const std::string* value = CheckpointMeta(shard.header, key);
    return value != nullptr && *value == want;
  };
  auto expect = [&](const CheckpointShard& shard, const std::string& key,
                    const std::string& want) -> absl::Status {
    if (same(shard, key, want)) return absl::OkStatus();
    const std::string* value = CheckpointMeta(shard.header, key);
    return absl::FailedPreconditionError(
        absl::StrCat("checkpoint: ", shard.header.path, ": ", key, " is ",
                     value ? *value : "absent", ", this engine has ", want,
                     " (a checkpoint loads only into the same model and precision)"));
  };

  // This rank's own shard when the group has the saved size, else rank 0's. When the layout is the
  // saved one, nothing else is read.
  const int first_rank = saved_world == world_size() ? rank() : 0;
  ASSIGN_OR_RETURN(CheckpointShard first, read_header(first_rank));
  RETURN_IF_ERROR(expect(first, "precision", PrecisionName(config_)));
  // Checkpoints written before the manifest existed are matched by their size alone.
  if (const std::string* saved = CheckpointMeta(first.header, "parameters")) {
    RETURN_IF_ERROR(CheckParameterManifest(first.header.path, *saved,
                                           ParameterManifest(layout_, param_dtype_)));
  }
  RETURN_IF_ERROR(expect(first, "num_parameters", std::to_string(layout_.num_elements())));
  ASSIGN_OR_RETURN(const NamedTensors frozen, source.frozen());
  if (!same(first, "world_size", std::to_string(saved_world))) {
    return absl::InvalidArgumentError(absl::StrCat("checkpoint: ", first.header.path,
                                                   ": world_size disagrees with the marker of ",
                                                   source.name));
  }
  const std::string unit_elements = UnitElements(layout_);
  const bool has_units = CheckpointMeta(first.header, "unit_elements") != nullptr;
  const bool same_layout = saved_world == world_size() &&
                           same(first, "zero_stage", std::to_string(config_.zero.stage)) &&
                           same(first, "domain_elements", std::to_string(domain_elements_)) &&
                           (!has_units || same(first, "unit_elements", unit_elements));
  if (!same_layout && !has_units) {
    return absl::FailedPreconditionError(absl::StrCat(
        "checkpoint: ", first.header.path,
        " has no unit_elements, so it loads only into a group of its own world size, ZeRO stage "
        "and units"));
  }

  // Step counts and client state, from `first` on the fast path and rank 0's shard otherwise; all
  // parsed before the engine changes.
  Metadata metadata;
  int64_t global_steps = 0, micro_steps = 0, skipped_steps = 0;
  auto take_metadata = [&](const CheckpointShard& shard) -> absl::Status {
    metadata = shard.header.metadata;
    auto number = [&](const std::string& key, int64_t* out) {
      const std::string* value = CheckpointMeta(shard.header, key);
      return value != nullptr && absl::SimpleAtoi(*value, out);
    };
    if (!number("global_steps", &global_steps) || !number("micro_steps", &micro_steps) ||
        !number("skipped_steps", &skipped_steps)) {
      return absl::InvalidArgumentError(
          absl::StrCat("checkpoint: ", shard.header.path, ": bad step counts"));
    }
    // Saved at an accumulation boundary: with another number of micro-batches per step, the count
    // moves to the same boundary of this engine's steps.
    int64_t saved_accumulation = 0;
    if (number("gradient_accumulation_steps", &saved_accumulation) && saved_accumulation > 0 &&
        micro_steps % saved_accumulation == 0) {
      micro_steps = micro_steps / saved_accumulation * config_.gradient_accumulation_steps;
    }
    return absl::OkStatus();
  };

  // The domain tensors to restore, and how a whole domain of one goes into the engine.
  struct Buffer {
    std::string name;
    at::ScalarType type;
    at::Tensor target;  // undefined for the weights, which live in UnitWeights
  };
  std::vector<Buffer> buffers = {{"weights", param_dtype_, at::Tensor()}};
  if (master_.defined()) buffers.push_back({"master", at::kFloat, master_});
  buffers.push_back({"exp_avg", state_dtype_, exp_avg_});
  buffers.push_back({"exp_avg_sq", state_dtype_, exp_avg_sq_});
  if (compensation_.defined()) buffers.push_back({"compensation", at::kBFloat16, compensation_});
  auto restore = [&](const Buffer& buffer, const at::Tensor& domain) {
    if (buffer.target.defined()) {
      buffer.target.copy_(domain);
      return;
    }
    for (size_t u = 0; u < layout_.units().size(); ++u) {
      UnitWeights(u).copy_(domain.narrow(0, domain_offset_[u], DomainLength(u)));
    }
  };
  auto restore_rng = [](const at::Tensor& state) {
    auto generator = at::detail::getDefaultCPUGenerator();
    std::lock_guard<std::mutex> lock(generator.mutex());
    generator.set_state(state);
  };

  try {
    if (same_layout) {
      RETURN_IF_ERROR(take_metadata(first));
      for (const Buffer& buffer : buffers) {
        RETURN_IF_ERROR(CheckTensor(first.header, buffer.name, buffer.type, domain_elements_));
      }
      for (const Buffer& buffer : buffers) {
        ASSIGN_OR_RETURN(at::Tensor saved, ReadShardTensor(first, buffer.name));
        restore(buffer, saved);
      }
      if (first.header.Find("rng_state") != nullptr) {
        ASSIGN_OR_RETURN(at::Tensor state, ReadShardTensor(first, "rng_state"));
        restore_rng(state);
      }
    } else {
      // Re-partitioning (NOTE [Re-partitioning on load]). Everything that can be checked without
      // the data comes first, so that a refused checkpoint leaves the engine as it was.
      std::vector<CheckpointShard> shards;
      for (int r = 0; r < saved_world; ++r) {
        if (r == first_rank) {
          shards.push_back(first);
          continue;
        }
        ASSIGN_OR_RETURN(CheckpointShard shard, read_header(r));
        shards.push_back(std::move(shard));
      }
      const ShardHeader& reference = shards[0].header;
      for (int r = 1; r < saved_world; ++r) {
        for (const char* key : kGroupKeys) {
          const std::string* want = CheckpointMeta(reference, key);
          const std::string* value = CheckpointMeta(shards[r].header, key);
          if ((want == nullptr) != (value == nullptr) || (want != nullptr && *want != *value)) {
            return absl::FailedPreconditionError(absl::StrCat(
                "checkpoint: ", shards[r].header.path, ": ", key, " is ", value ? *value : "absent",
                ", but ", reference.path, " has ", want ? *want : "absent"));
          }
        }
      }
      int saved_stage = -1;
      int64_t saved_domain = -1;
      const std::string* stage_value = CheckpointMeta(reference, "zero_stage");
      const std::string* domain_value = CheckpointMeta(reference, "domain_elements");
      if (stage_value == nullptr || !absl::SimpleAtoi(*stage_value, &saved_stage) ||
          saved_stage < 0 || saved_stage > 3 || domain_value == nullptr ||
          !absl::SimpleAtoi(*domain_value, &saved_domain)) {
        return absl::InvalidArgumentError(
            absl::StrCat("checkpoint: ", reference.path, ": bad zero_stage or domain_elements"));
      }
      RETURN_IF_ERROR(take_metadata(shards[0]));
      ASSIGN_OR_RETURN(const std::vector<int64_t> saved_units,
                       ParseUnitElements(reference, layout_.num_elements()));
      int64_t domain = 0;
      DomainSegments(saved_units, saved_world, saved_stage, 0, &domain);
      if (domain != saved_domain) {
        return absl::InvalidArgumentError(
            absl::StrCat("checkpoint: ", reference.path, ": domain_elements is ", saved_domain,
                         ", but unit_elements at ZeRO stage ", saved_stage, " on ", saved_world,
                         " ranks make ", domain));
      }

      // This rank's new domain, and the pieces of each saved domain that fill it. A saved stage-0
      // group is replicated, so rank 0's shard holds everything.
      int64_t target_domain = 0, target_elements = 0;
      const std::vector<DomainSegment> target = DomainSegments(
          UnitNumels(layout_), world_size(), config_.zero.stage, rank(), &target_domain);
      for (const DomainSegment& segment : target) target_elements += segment.length;
      std::vector<std::vector<Piece>> pieces(saved_world);
      int64_t covered = 0;
      for (int r = 0; r < (saved_stage == 0 ? 1 : saved_world); ++r) {
        pieces[r] =
            Overlap(DomainSegments(saved_units, saved_world, saved_stage, r, &domain), target);
        for (const Piece& piece : pieces[r]) covered += piece.length;
      }
      if (covered != target_elements) {
        return absl::InternalError(
            absl::StrCat("checkpoint: ", source.name, ": the saved domains cover ", covered,
                         " of this rank's ", target_elements, " parameter elements"));
      }
      for (int r = 0; r < saved_world; ++r) {
        if (pieces[r].empty()) continue;
        for (const Buffer& buffer : buffers) {
          RETURN_IF_ERROR(CheckTensor(shards[r].header, buffer.name, buffer.type, saved_domain));
        }
      }
      const CheckpointShard& rng_shard = shards[rank() < saved_world ? rank() : 0];
      const SafetensorsEntry* rng = rng_shard.header.Find("rng_state");
      if (rng != nullptr)
        RETURN_IF_ERROR(CheckTensor(rng_shard.header, "rng_state", at::kByte, rng->numel()));

      // The data, one tensor name at a time.
      for (const Buffer& buffer : buffers) {
        at::Tensor staged = at::zeros({domain_elements_}, at::TensorOptions().dtype(buffer.type));
        for (int r = 0; r < saved_world; ++r) {
          if (pieces[r].empty()) continue;
          ASSIGN_OR_RETURN(at::Tensor saved, ReadShardTensor(shards[r], buffer.name));
          for (const Piece& piece : pieces[r]) {
            staged.narrow(0, piece.target, piece.length)
                .copy_(saved.narrow(0, piece.source, piece.length));
          }
        }
        restore(buffer, staged);
      }
      if (rng != nullptr) {
        ASSIGN_OR_RETURN(at::Tensor state, ReadShardTensor(rng_shard, "rng_state"));
        restore_rng(state);
      }
    }
    grads_.zero_();
    RestoreFrozen(frozen);
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("checkpoint: ", source.name, ": ", e.what()));
  }

  global_steps_ = global_steps;
  micro_steps_ = micro_steps;
  skipped_steps_ = skipped_steps;
  last_lr_ = current_lr();
  RETURN_IF_ERROR(AllGatherResident());

  std::map<std::string, std::string> client_state;
  for (const auto& [key, value] : metadata) {
    if (key.rfind(kClientPrefix, 0) == 0) {
      client_state[key.substr(sizeof(kClientPrefix) - 1)] = value;
    }
  }
  RETURN_IF_ERROR(Wait(communicator_->Barrier()));
  return client_state;
}

}  // namespace tandem::engine
