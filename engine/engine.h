// The low-precision ZeRO engine: one rank of a data-parallel group training one module
// (docs/design.md §3).
//
// Usage (each rank):
//   auto engine = Engine::Create(model, communicator, config).value();
//   for (micro-batch) {
//     auto autocast = engine->Autocast();          // torch_autocast from the config (no-op if off)
//     auto out = model->forward(x);                  // the user's own module call
//     loss_fn(out).backward();                       // or out.backward(grad), any number of times
//     RETURN_IF_ERROR(engine->Step());               // updates at the accumulation boundary
//   }
//
// PyTorch-identical backward (NOTE [Gradient flow]): the engine never wraps forward or backward. It
// installs a post-hook on every trainable parameter's gradient accumulator. Each hook copies the
// fresh gradient (scaled by 1/(world * gradient_accumulation_steps) with gradient_reduction "mean")
// into its unit's reduction bucket (or straight into the gradient buffer: NOTE [Buckets]), frees
// param.grad, and once a unit is complete launches its reduction (all-reduce at stages 0-1,
// reduce-scatter at 2-3) while autograd keeps running. The first hook of a backward queues an
// autograd-engine final callback; when the backward ends it launches every unit not yet launched,
// in a fixed order, so all ranks issue the same collectives in the same order even when a rank's
// graph did not reach some parameters (they contribute zeros), and folds the reduced buckets into
// the gradient accumulation buffer. BlockModules (block.h) route their parameters' gradients in the
// same way from their recomputing backward. So loss.backward(), out.backward(non_scalar_grad), one
// backward through several engines' outputs, losses built outside the engine and several backward
// calls per step all reduce correctly; gradients accumulate until the boundary.
//
// Step() counts micro-steps; at every gradient_accumulation_steps-th call it computes the global
// gradient norm across the group, clips, runs the fused AdamW over this rank's partition,
// all-gathers the updated parameters (stages 1-2, and the resident parameters of stage 3) and
// zeroes the gradients.
//
// ZeRO stages and buffers (NOTE [Units] in layout.h for partitioning):
//   stage 0: everything replicated; 1: master weights and moments partitioned; 2: + gradients;
//   3: + parameters of BlockModules, gathered per block just in time (block.h). Parameters outside
//   any BlockModule stay resident at stage 3 (DeepSpeed's persistent parameters).
// Precision: fp32; bf16 params + fp32 master + fp32 moments + bf16 grads (16 B/param); with
// bf16_master_weights_and_grads the bf16 parameter is the master (no second copy) and with
// bf16_optimizer_states the moments are bf16: 8 B/param. tandem.bf16_update picks nearest, Kahan or
// stochastic rounding for bf16 masters.
//
// Frozen parameters (requires_grad false; NOTE [Frozen parameters] in frozen.cc) are held in the
// parameter dtype and broadcast from rank 0 like the others, but get no gradient buffer, no
// optimizer state and no reduction. At stage 3 those inside a BlockModule are partitioned and
// gathered with their block. They are checkpointed and exported with the rest, and an engine whose
// every parameter is frozen still runs forward and evaluation (Step() then only counts).
//
// Errors: Create returns InvalidArgument for a config/model mismatch. A failed or timed-out
// collective inside a hook cannot be returned from backward: it is recorded and returned by the
// next Step() (and the gradients of that step are not applied). No rank hangs its group (NOTE
// [Failed backward] in engine_step.cc): a rank whose backward never reached the engine contributes
// zeros at Step(); a backward that threw is finished by the next Step(), which returns Aborted, and
// at the optimizer step every rank of the group learns of it, skips the update and returns Aborted
// naming the rank; the engines are ready for the next step. Collective methods (Step at the
// boundary, Gather*, Save/Load, Export) must be called by every rank in the same order.
//
// Thread-safety: one training thread per engine; hooks may run on autograd threads (guarded).
#pragma once

#include <torch/nn/module.h>

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "engine/block.h"
#include "engine/communicator.h"
#include "engine/compat.h"
#include "engine/compute.h"
#include "engine/config_names.h"
#include "engine/gradient_reducer.h"
#include "engine/layout.h"
#include "engine/memory.h"

namespace torch::autograd {
struct Node;
}

namespace tandem::engine {

using NamedTensors = std::vector<std::pair<std::string, at::Tensor>>;

// A rank's checkpoint as Engine::SaveCheckpoint writes it, copied to host memory: tensors of its
// own, not views of the engine's buffers, so training may go on while it is written (an
// asynchronous save stalls the step only to take it).
struct CheckpointSnapshot {
  std::string shard;  // the shard's file name, rank_<r>_of_<w>.safetensors
  NamedTensors tensors;
  std::map<std::string, std::string> metadata;
  // Rank 0, with frozen parameters: frozen.safetensors, whole.
  NamedTensors frozen;
  std::map<std::string, std::string> frozen_metadata;
  std::string marker;  // rank 0: the "complete" marker's text
  int64_t bytes() const;
};

// A snapshot as one buffer (a safetensors file's bytes, each tensor's CRC-32 included), to keep or
// send whole, and back; DecodeCheckpointSnapshot's errors name `what` (a corrupted copy is
// DataLoss naming the tensor).
absl::StatusOr<std::string> EncodeCheckpointSnapshot(const CheckpointSnapshot& snapshot);
absl::StatusOr<CheckpointSnapshot> DecodeCheckpointSnapshot(std::string_view bytes,
                                                            const std::string& what);

// Where Engine::LoadCheckpoint and RestoreSnapshots read a saved group's state (checkpoint.cc).
struct CheckpointSource;

// Writes a snapshot's files into `directory` (created if missing), each atomically; not the
// marker. No collective: callable from any thread.
absl::Status WriteCheckpointSnapshot(const CheckpointSnapshot& snapshot,
                                     const std::string& directory);

// NOTE [Buckets]
// Gradients are reduced one unit at a time (NOTE [Units] in layout.h) while backward runs. A unit
// holds at most ReductionUnitElements: reduce_bucket_size, and no more than 1/kUnitsPerModel of the
// trainable parameters (but not under kMinUnitElements), so that with DeepSpeed's default of 5e8
// a model of any size reduces its first units while backward is still producing the rest, and no
// bucket holds the whole model's gradient. At most two reductions are in flight
// (kMaxBucketsInFlight; launching a third waits for the oldest). Where a unit is reduced:
// - stages 0 and 1 with communication_data_type equal to the gradient dtype (fp32 engines, or bf16
//   gradients with communication_data_type bf16): in place, in the gradient buffer: no bucket.
// - otherwise in a bucket of the communication dtype (fp32 by default), allocated when the unit's
//   first gradient arrives and freed once its reduction is folded into the gradient buffer; at
//   stages 2 and 3 the reduce-scatter's output shard too. MemoryReport::bucket_bytes is the most
//   these held at once.
constexpr int64_t kUnitsPerModel = 8;
constexpr int64_t kMinUnitElements = int64_t{1} << 20;
int64_t ReductionUnitElements(const Config& config, int64_t trainable_elements);

class Engine : public BlockHost {
 public:
  // Takes over `model`'s trainable parameters: converts them to the configured dtype, broadcasts
  // rank 0's values to the group, partitions them and installs the gradient hooks. All ranks call
  // Create with the same model architecture and config. A tensor registered under several names
  // (tied input and output embeddings) is one parameter, named by its first name: one slot, its
  // gradient accumulated once from every use; ExportSafetensors writes it under every name. At
  // ZeRO-3 it may not sit in a BlockModule (InvalidArgument naming both names).
  static absl::StatusOr<std::unique_ptr<Engine>> Create(std::shared_ptr<torch::nn::Module> model,
                                                        std::shared_ptr<Communicator> communicator,
                                                        Config config);
  ~Engine() override;
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Scope under which to run forward: autocast as compute() plans it, or no change.
  compat::AutocastScope Autocast() const;
  // What forward computes in on this device (NOTE [Compute dtype] in compute.h): whether it runs
  // under autocast, the dtype the model's activations run in (the model is told with its own
  // set_compute_dtype, e.g. models::VisionEncoder) and the dtype its output comes out in.
  const ComputePlan& compute() const { return compute_; }

  // Sugar for loss.backward() (errors as a Status instead of an exception; call Step() after a
  // failed one too, so the group's collectives stay matched).
  absl::Status Backward(const at::Tensor& loss);

  // Call once per micro-batch, after its backward calls.
  absl::Status Step();

  // Clipping by the norm of a larger model than this group's (both groups of a job together): at
  // each accumulation boundary Step() passes the group's squared gradient norm to `combine`, which
  // returns the squared norm of the whole model (e.g. this group's plus the other group's,
  // exchanged with it). Step() clips by that norm against gradient_clipping and skips the update
  // when it is not finite, so groups that combine the same squares make the same decision.
  // last_grad_norm() stays this group's norm; last_global_grad_norm() is the combined one. An error
  // from `combine` fails the Step.
  using GradNormCombiner = std::function<absl::StatusOr<double>(double group_squares)>;
  void SetGradNormCombiner(GradNormCombiner combine) { combine_norm_ = std::move(combine); }
  // The group's squared gradient norm now (a collective at ZeRO stages 1-3: every rank calls it).
  absl::StatusOr<double> GroupGradSquares();
  // Parameters this rank leaves out of the group's squared gradient norm, because a rank of another
  // group counts them: the replicated parameters (norms) of tensor-parallel ranks other than the
  // first, whose gradients equal the first rank's, so that the squares summed over the
  // tensor-parallel group count every parameter once (Megatron-LM's
  // param_is_not_tensor_parallel_duplicate). Call before the first Step; names that are not
  // trainable parameters are ignored.
  void LeaveOutOfGradNorm(const std::vector<std::string>& names);
  bool IsGradientAccumulationBoundary() const;

  // State.
  int64_t global_steps() const { return global_steps_; }
  int64_t micro_steps() const { return micro_steps_; }
  int64_t skipped_steps() const { return skipped_steps_; }
  double last_grad_norm() const { return last_grad_norm_; }
  double last_global_grad_norm() const { return last_global_grad_norm_; }
  double last_lr() const { return last_lr_; }
  double current_lr() const;  // the learning rate the next update will use (default group)
  // Each optimizer group's name and the lr its next update will use (tandem.param_groups).
  std::vector<std::pair<std::string, double>> group_lrs() const;
  const Config& config() const { return config_; }
  const Layout& layout() const { return layout_; }

  // Gives parameter `name` (a trainable one: frozen ones are ignored) the random stream of shard
  // `shard` of its weight, for stochastic rounding (NOTE [Random streams] in engine_step.cc): call
  // it, before the first Step, for the parameters a tensor-parallel group splits, so that each
  // rank's shard rounds with numbers of its own while the parameters every rank holds whole round
  // alike everywhere. NotFound for a name the model does not have.
  absl::Status SetShardStream(const std::string& name, int64_t shard);
  int rank() const { return communicator_->rank(); }
  int world_size() const { return communicator_->world_size(); }
  MemoryReport Memory() const;

  // Collective reads, for checks and exports: full fp32 tensors with the module's parameter names.
  // Parameters come from the master copy when there is one. Trainable parameters only;
  // GatherFrozenParameters gives the frozen ones.
  absl::StatusOr<NamedTensors> GatherParameters();
  absl::StatusOr<NamedTensors> GatherFrozenParameters();
  // Parameters that train (0 when the whole model is frozen), and those held frozen.
  int64_t trainable_parameters() const { return layout_.num_elements(); }
  int64_t frozen_parameters() const;
  // The reduced gradients accumulated since the last update (call between backward and Step).
  absl::StatusOr<NamedTensors> GatherGradients();

  // Writes the full model (fp32, stable parameter names) as safetensors; rank 0 writes, all call.
  absl::Status ExportSafetensors(const std::string& path);
  // What ExportSafetensors writes, on every rank (collective): every parameter, trainable and
  // frozen, under each of its names, in named_parameters() order. `metadata` gets the header's.
  absl::StatusOr<NamedTensors> ExportTensors(
      std::map<std::string, std::string>* metadata = nullptr);

  // Checkpoints (engine/checkpoint.cc). SaveCheckpoint writes this rank's shard into `directory`
  // atomically, and rank 0 writes the "complete" marker after every rank finished; call at an
  // accumulation boundary. `client_state` (e.g. the data position) is stored with each shard and
  // returned by LoadCheckpoint, which restores params, master, moments, step counts and the RNG.
  // LoadCheckpoint accepts a checkpoint written by a group of any world size at any ZeRO stage and
  // re-partitions it onto this group's layout (NOTE [Re-partitioning on load] in checkpoint.cc);
  // the precision and the model (each parameter's name, shape and dtype, in order) must be the
  // same (FailedPrecondition naming the first parameter that differs otherwise).
  absl::Status SaveCheckpoint(const std::string& directory,
                              const std::map<std::string, std::string>& client_state = {});
  // SaveCheckpoint in three parts, for a save written in the background: the state copied to host
  // memory (collective: frozen parameters are gathered; SaveCheckpoint's preconditions), written
  // by WriteCheckpointSnapshot on any thread, then, once every rank has written its snapshot,
  // CompleteCheckpoint: rank 0 writes the marker (collective: two barriers). A snapshot copies into
  // `reuse`'s tensors where their names, shapes and dtypes match (the previous save's, written
  // already): memory touched before copies several times faster than fresh pages. From a GPU it
  // copies into page-locked memory.
  absl::StatusOr<CheckpointSnapshot> SnapshotCheckpoint(
      const std::map<std::string, std::string>& client_state = {}, CheckpointSnapshot reuse = {});
  absl::Status CompleteCheckpoint(const CheckpointSnapshot& snapshot, const std::string& directory);
  absl::StatusOr<std::map<std::string, std::string>> LoadCheckpoint(const std::string& directory);
  // Restores the state of SnapshotCheckpoint's snapshots, one per rank of the group that took them
  // (in rank order), as LoadCheckpoint restores a checkpoint's files: nothing is read from disk.
  // Into a group of the snapshots' world size and layout each rank reads only its own (the others
  // may be null); into another, each reads the parts of the saved domains its own covers
  // (NOTE [Re-partitioning on load]), which must be there. Frozen parameters come from rank 0's
  // snapshot where it is given, and keep their values elsewhere (training never changes them).
  // The snapshots are only read: one may be restored again. Collective; errors as LoadCheckpoint's,
  // a missing snapshot named by its rank.
  absl::StatusOr<std::map<std::string, std::string>> RestoreSnapshots(
      const std::vector<const CheckpointSnapshot*>& snapshots);

  // BlockHost.
  bool gathers_parameters() const override { return config_.zero.stage == 3; }
  void GatherBlock(int block_id) override;
  void ReleaseBlock(int block_id) override;
  void EnterBackward() override;
  void AcceptBlockGradients(int block_id, const std::vector<at::Tensor>& grads) override;
  std::string ParameterName(const at::Tensor& parameter) const override;

  // Called by the gradient-accumulator hook of parameter `index`.
  void OnGradientAccumulated(int index);

 private:
  // A set of parameters that share their optimizer hyperparameters (engine/optimizer_groups.cc):
  // a tandem.param_groups entry or the default group, split by whether no_decay applies.
  struct OptimizerGroup {
    std::string name;          // "default" or the config path, e.g. "tandem.param_groups[0]"
    std::optional<double> lr;  // the group's peak lr; unset: the optimizer's (and its schedule)
    double weight_decay = 0.0;
    double beta1 = 0.9, beta2 = 0.999, eps = 1e-8;
  };
  // A run of consecutive parameters of one optimizer group inside a unit's domain; one parameter's
  // part under stochastic rounding (NOTE [Random streams] in engine_step.cc).
  struct UpdateSegment {
    int unit = 0;
    int64_t begin = 0;  // offset in the unit's domain
    int64_t length = 0;
    int group = 0;   // index in optimizer_groups_
    int param = -1;  // under stochastic rounding: the parameter (index in params_), else -1
    int64_t param_offset = 0;  // and the index in it of the segment's first element
  };
  // Whether an update rounds stochastically: bf16 masters under bf16_update "stochastic", or bf16
  // moments under bf16_optimizer_states_rounding "stochastic".
  bool RoundsStochastically() const;
  // Every trainable parameter's stream key from its name (NOTE [Random streams]).
  void InitStreamKeys();

  // A block's frozen parameters at ZeRO-3: one flat unit, padded and sharded like a trainable one.
  struct FrozenUnit {
    std::vector<int> params;       // indices in frozen_
    std::vector<int64_t> offsets;  // of each in the unit
    int64_t numel = 0, padded = 0, shard = 0;
    int64_t shard_offset = 0;  // in frozen_shards_
  };

  Engine(std::shared_ptr<torch::nn::Module> model, std::shared_ptr<Communicator> communicator,
         Config config);
  absl::Status Initialize();
  absl::Status InitializeBuffers();
  void InstallHooks();
  // engine/optimizer_groups.cc: each parameter's group (InvalidArgument naming a
  // tandem.param_groups entry that matches no parameter), then the update segments over the
  // layout's domains.
  absl::Status AssignOptimizerGroups();
  void BuildUpdateSegments();
  double GroupLr(const OptimizerGroup& group) const;
  // Before a stage-3 gather: every rank of the group gathers the same block in the same phase
  // (FailedPrecondition naming both blocks otherwise), one all-gather of a float per rank.
  absl::Status CheckBlockOrder(int block_id);
  // engine/frozen.cc. `block_of` maps every parameter of a BlockModule to its block.
  absl::Status InitializeFrozen(const std::map<const void*, int>& block_of);
  absl::Status GatherFrozenBlock(int block_id);
  void ReleaseFrozenBlock(int block_id);
  // SnapshotCheckpoint; with `copy` false the snapshot's tensors may be the engine's own buffers
  // (SaveCheckpoint writes them before training goes on).
  absl::StatusOr<CheckpointSnapshot> TakeSnapshot(
      const std::map<std::string, std::string>& client_state, bool copy, CheckpointSnapshot reuse);
  // The frozen parameters whole, as rank 0 writes them to frozen.safetensors (with its metadata);
  // nothing on other ranks (collective at stage 3).
  absl::Status SnapshotFrozen(CheckpointSnapshot& snapshot);
  // Reads and checks <directory>/frozen.safetensors without changing the engine; RestoreFrozen
  // then takes the values.
  absl::StatusOr<NamedTensors> ReadFrozen(const std::string& directory) const;
  // FailedPrecondition naming `where` unless `values` are this engine's frozen parameters, by name
  // and shape, in order.
  absl::Status CheckFrozen(const NamedTensors& values, const std::string& where) const;
  // LoadCheckpoint's and RestoreSnapshots' restore, from either source.
  absl::StatusOr<std::map<std::string, std::string>> Load(const CheckpointSource& source);
  void RestoreFrozen(const NamedTensors& values);
  int64_t FrozenBytes() const;
  bool IsShardedFrozen(int index) const;  // a stage-3 block's frozen parameter

  // Views in "domain" coordinates: the part of each unit this rank updates (all of it at stage 0).
  int64_t DomainStart(int unit) const;
  int64_t DomainLength(int unit) const;
  at::Tensor UnitWeights(int unit) const;
  at::Tensor UnitGradients(int unit) const;
  at::Tensor UnitDomainGradients(int unit) const;
  bool IsResident(int unit) const;

  // The boundary's one group check (NOTE [Failed backward]): the squared gradient norm over the
  // group, and the ranks whose backward failed in this optimizer step.
  struct GroupCheck {
    double squares = 0.0;
    std::vector<int> failed_ranks;
  };
  absl::StatusOr<GroupCheck> CheckGroup(bool failed_here);
  // The squares of this rank's domain of unit `unit`'s gradients, less those LeaveOutOfGradNorm
  // names.
  double DomainSquares(int unit) const;
  absl::Status ApplyUpdate(double grad_scale);
  absl::Status AllGatherResident();
  absl::StatusOr<std::vector<at::Tensor>> GatherUnits(bool gradients);
  absl::Status Wait(const std::shared_ptr<Work>& work) const;

  std::shared_ptr<torch::nn::Module> model_;
  std::shared_ptr<Communicator> communicator_;
  Config config_;
  ComputePlan compute_;
  Layout layout_;
  std::shared_ptr<Engine*> self_;  // hooks hold it; nulled on destruction

  std::vector<at::Tensor> params_;                 // trainable parameters, module order
  std::unordered_map<const void*, int> index_of_;  // TensorImpl -> index in params_
  // Second names of tied parameters (a tensor registered under several names): name -> index in
  // params_. The parameter has one slot; export writes it under every name.
  std::vector<std::pair<std::string, int>> aliases_;
  std::vector<std::shared_ptr<torch::autograd::Node>> accumulators_;
  std::vector<uintptr_t> hook_keys_;
  // Frozen parameters, module order, each tensor once (frozen.cc).
  std::vector<at::Tensor> frozen_;
  std::vector<std::string> frozen_names_;
  std::vector<std::vector<int64_t>> frozen_shapes_;
  std::unordered_map<const void*, int> frozen_index_of_;
  std::vector<std::pair<std::string, int>> frozen_aliases_;
  std::vector<FrozenUnit> frozen_units_;     // per block id (stage 3), empty otherwise
  at::Tensor frozen_shards_;                 // stage 3: this rank's chunks of frozen_units_
  std::vector<at::Tensor> frozen_gathered_;  // per block id, while gathered

  std::vector<OptimizerGroup> optimizer_groups_;
  std::vector<int> group_of_param_;  // per parameter: index in optimizer_groups_
  std::vector<UpdateSegment> segments_;
  std::vector<uint64_t> stream_keys_;  // per trainable parameter (NOTE [Random streams])
  std::vector<BlockModule*> blocks_;
  std::vector<std::string> block_names_;  // their module paths, e.g. "blocks.3"
  std::vector<int> block_unit_;

  at::Device device_{at::kCPU};
  at::ScalarType param_dtype_ = at::kFloat;
  at::ScalarType grad_dtype_ = at::kFloat;
  at::ScalarType state_dtype_ = at::kFloat;
  at::ScalarType comm_dtype_ = at::kFloat;
  float gradient_scale_ = 1.0f;

  // Parameter storage. resident_: full coordinates of resident units (all units below stage 3).
  at::Tensor resident_;
  std::vector<int64_t> resident_offset_;  // per unit, -1 if not resident
  at::Tensor owned_shards_;               // stage 3: this rank's chunks of block units
  std::vector<int64_t> owned_offset_;     // per unit, -1 if resident
  std::vector<at::Tensor> gathered_;      // per unit, while a block is gathered
  // Optimizer domain buffers.
  std::vector<int64_t> domain_offset_;
  int64_t domain_elements_ = 0;
  at::Tensor master_, exp_avg_, exp_avg_sq_, compensation_;
  at::Tensor grads_;  // full coordinates (stages 0-1) or shard coordinates (2-3)

  // The gradient flow between steps and its state (gradient_reducer.h); made by Initialize.
  std::unique_ptr<GradientReducer> reducer_;

  std::atomic<int64_t> micro_steps_{0};  // hooks read it (GradientReducer::Options::at_boundary)
  int64_t global_steps_ = 0;
  int64_t skipped_steps_ = 0;
  double last_grad_norm_ = 0.0;
  double last_global_grad_norm_ = 0.0;
  double last_lr_ = 0.0;
  GradNormCombiner combine_norm_;
  // Per unit: element ranges [begin, end) in unit coordinates left out of the norm.
  std::vector<std::vector<std::pair<int64_t, int64_t>>> left_out_of_norm_;
};

}  // namespace tandem::engine
