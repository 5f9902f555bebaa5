// One rank's part of the training step of docs/design.md §2, whichever process it runs in. A job
// has two stages, each a group of ranks:
//
//   VisionStage (step/vision_stage.cc)   images -> embeddings, sent to the LLM ranks owning their
//                                        rows; their gradients back -> embeddings.backward(grad)
//                                        -> engine step
//   LlmStage    (step/llm_stage.cc)      embeddings in -> loss over the global batch's
//                                        target tokens
//                                        -> loss.backward() -> leaf gradients out -> engine step;
//                                        greedy captions and their scores for evaluation
//
// A stage meets the other group only through a transport::Transport, and its own group only through
// its engine's Communicator, so the same code runs as an actor (actors/worker.cc: one stage per
// process, gRPC or local links, Gloo or NCCL) and in the colocated trainer (trainer/colocated.cc:
// both stages in one process over transport/in_process.h).
//
// Every rank draws the same sample order from its own sampler (same seed), so each knows the whole
// global batch without being told, and plans each micro-batch alike (step/batch_plan.h): which
// samples each LLM replica trains on, which images each vision replica encodes.
//
// Commands (RunStep, Evaluate, SaveCheckpoint, Export, Resume) run on one thread at a time, in the
// same order on every rank of both groups; the two groups run theirs concurrently. LibTorch header.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/role.h"
#include "data/sampler.h"
#include "jobspec/job_config.h"
#include "step/batch_plan.h"
#include "step/exchange.h"
#include "step/held_snapshots.h"
#include "step/job_data.h"
#include "step/results.h"
#include "step/step_common.h"
#include "transport/transport.h"

namespace torch::nn {
class Module;
}  // namespace torch::nn

namespace tandem::engine {
class Communicator;
class CountingCommunicator;
class Engine;
struct CheckpointSnapshot;
}  // namespace tandem::engine

namespace tandem::step {

// Where one stage runs.
//
// NOTE [Parallel sets]
// A group of group_size ranks with `parallel` > 1 is group_size / parallel data-parallel replicas
// of `parallel` ranks each: rank = replica * parallel + index. The ranks of one replica share its
// samples and split its model: tensor parallelism in the LLM group (index is the tensor-parallel
// rank), sequence parallelism in the vision group (index is the sequence-parallel rank). Samples
// are owned by replicas (step/ownership.h over the replica count). Embeddings go from each vision
// rank (its positions of its replica's rows) to every rank of the LLM replica owning the rows, or
// with llm.parallel.embeddings "broadcast" to its index 0 only, which assembles them on its device
// and broadcasts them over `parallel_communicator` (embeddings_broadcast()); gradients come back
// from index 0 of that LLM replica only, split by positions.
// Communicators: the LLM engine reduces over its data-parallel ranks (one engine group per tensor
// index: ZeRO partitions over replicas only); the vision engine over the whole group (each
// sequence-parallel rank's gradient covers its positions, so the whole group's sum is the
// gradient, as DeepSpeed reduces over its sequence-data-parallel group). `parallel_communicator`
// joins the ranks of this rank's replica.
struct Placement {
  std::string transfer_key;  // TransferTag::job_id of this job attempt
  int rank = 0;
  int group_size = 1;
  int peer_group_size = 1;  // ranks of the other group
  int parallel = 1;         // ranks of one replica of this group (NOTE [Parallel sets])
  int peer_parallel = 1;    // of the other group
  std::shared_ptr<engine::Communicator> parallel_communicator;  // the replica's ranks; null at 1
  c10::Device device{c10::kCPU};
  std::chrono::milliseconds timeout{300000};  // every transfer and collective
  std::string run_dir;  // LLM rank 0 writes tokenizer.json there at setup; "" writes nothing
};

// What a stage is doing, for an actor's heartbeat: its phase (setup, data, forward, backward,
// transfer, optimizer, evaluate, checkpoint, idle) and the sequence number of its group's last
// collective.
struct StageProgress {
  std::atomic<const char*> phase{"idle"};
  std::atomic<int64_t> last_collective{0};
};

// NOTE [Bad samples]
// Under data.on_bad_sample "skip", a training sample that cannot be read is left out of its
// micro-batch on every rank alike, before any rank plans the step. The vision ranks find them:
// each checks every sample of the step (its shard's table, its images' headers: the same verdict
// on every rank) and reads the images of its replica's block, an image that fails marking its
// sample. The vision group sums its flags (a collective), and each vision rank sends the sum to
// the LLM ranks it answers for, as with the gradient norms (CombineGradSquares). Every rank then
// drops the flagged samples; a micro-batch left with none takes its share of the step's samples
// spread evenly again. The data position does not move (the samples were drawn), so a resumed run
// leaves out the same samples, and the step's loss divides by the target tokens of the samples
// kept, as a run without them would.
//
// NOTE [Snapshots in memory]
// Under failure.snapshot_every N, at the end of every N-th step (not the last), each rank copies
// its state (Engine::SnapshotCheckpoint: its ZeRO shard of weights and optimizer states, the
// compensation, the step counts, the RNG, and the data position in the client state) into one
// host buffer (engine::EncodeCheckpointSnapshot) and keeps it: its last two. Its buddy is a rank
// of the other group, as a machine apart: vision rank v's is LLM rank v mod L, LLM rank l's vision
// rank l mod V. It sends the buffer to the buddy on the data plane, its size first
// (TRANSFER_KIND_SNAPSHOT, micro-batch 0) and then its bytes (micro-batch 1), and awaits the sizes
// of the copies it is the buddy for, then expects their bytes; they arrive while the next step
// trains, at whose end the rank waits for them and for its own sends. A copy replaces the
// previous one of its rank only once whole. So at any moment every rank's state after the last
// snapshot step or the one before is in two memories, and a group that lost one rank restores
// the others from their own and the lost one from its buddy's copy (RestoreSnapshot), as from a
// checkpoint (Engine::RestoreSnapshots), with nothing read from disk. A step's cost is the host
// copy and its encoding into one buffer; the memory a rank holds is twice its state and its
// buddies' copies.
//
// NOTE [Packed text]
// Under data.pack_tokens the plan (which LLM replica packs which samples into which rows) needs
// every sample's text token count. The vision ranks count them where the samples are read: their
// ImagePrefetcher plans each micro-batch ahead of the step, on its thread. When the step begins,
// each vision rank sends the step's counts to the LLM ranks it answers for (one transfer a step,
// TRANSFER_KIND_TEXT_TOKENS); the LLM ranks plan from them and each replica encodes only its own
// samples, checking that each has the count it was planned with. The loss's denominator, the
// target tokens of the whole global batch, is the group's sum of the replicas' counts, as
// unpacked. A sample's text is thus encoded once a step by each vision rank, off the critical
// path, and once by the LLM replica that trains on it.
class Stage {
 public:
  virtual ~Stage();
  Stage(const Stage&) = delete;
  Stage& operator=(const Stage&) = delete;

  Role role() const { return role_; }
  const char* group() const { return RoleName(role_); }  // "vision", "llm"
  const Placement& placement() const { return placement_; }
  const JobData& data() const { return *data_; }
  // The group's model's parameters, whole (with tensor parallelism, not only this rank's shards).
  virtual int64_t parameters() const;
  // The last completed step: 0, the resumed checkpoint's, or the last RunStep's.
  int64_t step() const { return step_; }
  engine::Engine& engine() { return *engine_; }

  // Runs optimizer step `step` (REQUIRES: step() + 1): draws the global batch's micro-batches,
  // trains this rank's rows of each, exchanges with the other group and steps the engine. A failure
  // names the group, the rank and the step ("vision rank 0 step 5: ..."), and withdraws every
  // transfer still expected, so nothing lands in the step's freed buffers.
  absl::StatusOr<StepResult> RunStep(int64_t step);
  // Greedy captions of the held-out set (schedule.eval_samples of it) after step `step`. The LLM
  // ranks return the scores of the samples they own; vision ranks return zeros.
  absl::StatusOr<EvalCounts> Evaluate(int64_t step);
  // Saves this rank's shard under <directory>/<group> with the step and the data position; LLM
  // rank 0 also writes <directory>/tokenizer.json and, for sharded data, <directory>/data.json.
  // Collective: every rank of the group calls it, and takes part even after a local error, so the
  // group's collectives stay matched. Under checkpoint.async it returns once the rank's state is
  // copied to host memory and writes the shard on a thread of its own; FinishCheckpoint completes
  // the save (a save still under way is finished first).
  absl::Status SaveCheckpoint(int64_t step, const std::string& directory);
  // The second half of an asynchronous save of `step` into `directory`: waits for the shard's
  // write, then the group's marker (collective, as SaveCheckpoint). FailedPrecondition when no
  // such save is under way; OK for a save that was not asynchronous.
  absl::Status FinishCheckpoint(int64_t step, const std::string& directory);
  // Writes the group's full weights as safetensors (rank 0 writes; every rank must call it).
  absl::Status Export(const std::string& path);
  // The directory of <checkpoint> this rank's group saves its shards in: <group>, or with tensor
  // parallelism llm/tensor-<index>-of-<parallel> (one engine group per tensor index).
  std::string CheckpointGroupDirectory() const;
  // Loads the group's shards <checkpoint>/<group> (collective) and continues from their step and
  // data position, once the data shards the next step reads match their index's checksums (the
  // vision ranks check them, each a share).
  absl::StatusOr<ResumePoint> Resume(const std::string& checkpoint);
  // NOTE [Snapshots in memory]: continues from a snapshot of this rank's state (its own, kept, or
  // the copy its buddy held), as Resume from a checkpoint (collective over the group; every rank
  // restores the same step). Errors name `what`.
  absl::StatusOr<ResumePoint> RestoreSnapshot(std::string_view bytes, const std::string& what);
  // What this rank holds of its snapshots (the copies still arriving kept if they arrived whole),
  // moved out: the stage holds none after.
  HeldSnapshots TakeHeldSnapshots();
  const HeldSnapshots& held_snapshots() const { return held_; }
  // NOTE [Snapshots in memory], at a restart whose ranks keep their places: this rank's state of
  // step `step` is restored when the next RunStep begins (every rank of both groups is assigned
  // by then), from `held`'s own snapshot of that step or, with `from_peer` >= 0, the copy that
  // rank of the other group sends; it first sends `held`'s copies of the ranks `send_to` to them.
  // The stage stands at step `step` from now on.
  void RestoreFromMemoryAtNextStep(int64_t step, HeldSnapshots held, int from_peer,
                                   std::vector<int> send_to);

 protected:
  Stage(Role role, const jobspec::JobConfig& job, std::shared_ptr<const JobData> data,
        Placement placement, std::shared_ptr<transport::Transport> transport,
        StageProgress* progress);
  // Moves `model` (built under the group's seed) to the placement's device, wraps it in an engine
  // with the group's config over `communicator`, and decides the dtype embeddings cross in.
  // `left_out_of_norm`: parameters another rank of the replica counts in the gradient norm
  // (Engine::LeaveOutOfGradNorm).
  absl::Status Build(std::shared_ptr<torch::nn::Module> model,
                     std::shared_ptr<engine::Communicator> communicator,
                     const std::vector<std::string>& left_out_of_norm = {});

  // The group's part of one step: `batches` are the sample indices of every micro-batch.
  virtual absl::StatusOr<StepResult> Train(int64_t step,
                                           const std::vector<std::vector<int64_t>>& batches) = 0;
  // NOTE [Bad samples]: this rank's flags for the samples of `batches` in order (non-zero: it
  // cannot be read). The vision stage reads them; others have none to give.
  virtual absl::StatusOr<std::vector<float>> FindBadSamples(
      int64_t step, const std::vector<std::vector<int64_t>>& batches) {
    size_t samples = 0;
    for (const auto& batch : batches) samples += batch.size();
    return std::vector<float>(samples, 0.0f);
  }
  // NOTE [Bad samples]: the flags every rank agreed on (non-zero: left out), for the log.
  virtual void LogBadSamples(int64_t step, const std::vector<std::vector<int64_t>>& batches,
                             const std::vector<float>& flags) {}
  // The group's part of evaluation batch `batch_index` (held-out samples `indices`).
  virtual absl::StatusOr<EvalCounts> EvaluateBatch(int64_t step, int64_t batch_index,
                                                   const std::vector<int64_t>& indices) = 0;
  // After the last evaluation batch, or after a failed one: waits for what is still in flight.
  virtual absl::Status FinishEvaluation() { return absl::OkStatus(); }
  virtual absl::Status SaveExtras(const std::string& directory) { return absl::OkStatus(); }
  // The whole model as Export writes it; the LLM stage assembles tensor-parallel shards.
  virtual absl::Status ExportWeights(const std::string& path);
  // Loads the group's part of <checkpoint> into the engine (collective); the LLM stage reshards a
  // checkpoint saved at another tensor-parallel degree.
  virtual absl::StatusOr<ResumePoint> LoadGroup(const std::string& checkpoint);

  const jobspec::JobConfig& job() const { return job_; }
  int64_t MicroBatchSize() const {
    return job_.schedule.global_batch / job_.schedule.micro_batches;
  }
  // NOTE [Parallel sets]: this rank's replica and its index in it, and the replica counts.
  int replica() const { return placement_.rank / placement_.parallel; }
  int parallel_index() const { return placement_.rank % placement_.parallel; }
  int replicas() const { return placement_.group_size / placement_.parallel; }
  int peer_replicas() const { return placement_.peer_group_size / placement_.peer_parallel; }
  // The LLM group split by tensor parallelism (the vision group's `parallel` is sequence
  // parallelism).
  bool tensor_parallel() const { return role_ == Role::kLlm && placement_.parallel > 1; }
  // llm.parallel.embeddings is "broadcast" and the LLM group is tensor-parallel: only index 0 of an
  // LLM replica receives embeddings, and broadcasts them to the replica (NOTE [Parallel sets]).
  bool embeddings_broadcast() const {
    const int tensor = role_ == Role::kLlm ? placement_.parallel : placement_.peer_parallel;
    return job_.llm.embeddings == jobspec::EmbeddingRoute::kBroadcast && tensor > 1;
  }
  // Who works on what of micro-batch `indices` of `dataset` (step/batch_plan.h), the same on every
  // rank of both groups. `training`: balanced under schedule.balance and packed under
  // data.pack_tokens; otherwise (evaluation) contiguous blocks of unpacked samples. Encodes the
  // samples' text only to pack, unless `encoded` gives each sample's token count (NOTE [Packed
  // text]: an LLM rank has them from the vision ranks); its errors name the sample (one longer
  // than data.pack_tokens among them).
  absl::StatusOr<MicroBatchPlan> Plan(const data::Dataset& dataset,
                                      const std::vector<int64_t>& indices, bool training,
                                      const std::vector<int64_t>* encoded = nullptr) const;
  // This rank's replica's block of a plan's exchange order (images), and the blocks of the peer
  // group's replicas sharing it (peer rank = replica * peer_parallel + index).
  SampleRange MyImages(const MicroBatchPlan& plan) const {
    return (role_ == Role::kVision ? plan.vision_images : plan.llm_images)[replica()];
  }
  std::vector<std::pair<int, SampleRange>> Overlaps(const MicroBatchPlan& plan) const {
    return ImageOverlaps(MyImages(plan),
                         role_ == Role::kVision ? plan.llm_images : plan.vision_images);
  }
  transport::TransferTag Tag(transport::TransferKind kind, int64_t step, int64_t micro_batch,
                             SampleRange samples, int source_rank) const {
    return MakeTag(placement_.transfer_key, kind, step, micro_batch, samples, source_rank);
  }
  // Posts `destination` for the transfer `tag`.
  absl::Status Expect(const transport::TransferTag& tag, const at::Tensor& destination);
  // Sends `source` (kept alive by the caller until the send is waited for) to peer rank `peer`.
  absl::StatusOr<std::unique_ptr<transport::SendHandle>> Send(int peer,
                                                              const transport::TransferTag& tag,
                                                              const at::Tensor& source,
                                                              StepResult* result);
  // Wait for an expected transfer, and for sends to be taken; the time they block counts as
  // waiting (WaitedSeconds), not as compute.
  absl::Status Await(const transport::TransferTag& tag);
  absl::Status WaitSends(std::vector<std::unique_ptr<transport::SendHandle>>& sends);
  // One value a sample of step `step` (fp32), from the vision ranks to the LLM ranks: LLM rank p
  // hears from vision rank p mod V (the vision group's size), as with the gradient norms. A vision
  // rank sends `values` to its LLM ranks (they read it until the sends are waited for); an LLM
  // rank receives `count` values.
  absl::Status SendToLlmRanks(transport::TransferKind kind, int64_t step, const at::Tensor& values,
                              std::vector<std::unique_ptr<transport::SendHandle>>* sends);
  absl::StatusOr<at::Tensor> ReceiveFromVision(transport::TransferKind kind, int64_t step,
                                               int64_t count);
  // Seconds this rank has waited since it was built: for transfers, and in its collectives.
  double WaitedSeconds() const;
  // Whether every rank of the group must take part in each generation step (ZeRO-3 gathers
  // parameters collectively), even one that owns no sample of a batch.
  bool collective_generation() const;
  void SetPhase(const char* phase);

  c10::Device device() const { return placement_.device; }
  // Host memory for what crosses between the groups: page-locked on a GPU placement, so copies to
  // and from the device run at full speed and ToDevice need not wait for them.
  at::Tensor HostBuffer(at::IntArrayRef sizes, at::ScalarType dtype) const;
  // `tensor` (on the device) in a HostBuffer; waits for the copy.
  at::Tensor ToHost(const at::Tensor& tensor) const;
  // `host` on the device; from a HostBuffer the copy is queued on the current stream, not waited
  // for.
  at::Tensor ToDevice(const at::Tensor& host) const;
  // vision.freeze holds "*": the vision group trains nothing, runs its forward without autograd,
  // and the LLM group sends it no gradients.
  bool vision_frozen() const { return jobspec::FreezesWholeGroup(job_.vision.freeze); }
  at::ScalarType embedding_dtype() const { return embedding_dtype_; }
  int64_t patches() const { return job_.vision.model.num_features(); }  // embeddings per image
  int64_t width() const { return job_.llm.model.hidden; }
  data::Sampler& sampler() { return sampler_; }
  // `value` (0 <= value < 2^48) summed over the group's engine communicator (collective; `value`
  // itself at one rank).
  absl::StatusOr<int64_t> SumOverGroup(int64_t value);
  bool skip_bad_samples() const { return job_.data.on_bad_sample == data::BadSamplePolicy::kSkip; }

 private:
  // NOTE [Bad samples]: drops the samples any vision rank flagged from `batches` (collective over
  // both groups) and returns how many were dropped.
  absl::StatusOr<int64_t> LeaveOutBadSamples(int64_t step,
                                             std::vector<std::vector<int64_t>>& batches);
  // The vision group's flags summed, on every rank of both groups.
  absl::StatusOr<std::vector<float>> ShareBadSamples(int64_t step, std::vector<float> flags);

  // Moves the data to `resume`'s position once the shards the next step reads match their index
  // (Resume), and the stage to its step.
  absl::Status SeekData(const ResumePoint& resume);
  // NOTE [Snapshots in memory]: after step `step`, keeps this rank's state and starts sending it
  // to its buddy, after finishing the exchange before (collective over the group, and paired with
  // the buddies' calls).
  absl::Status TakeMemorySnapshot(int64_t step);
  // Waits for the last exchange's copies and sends; with `harvest`, only keeps the copies that
  // arrived whole already (the job is ending: a peer may be gone).
  absl::Status FinishSnapshotExchange(bool harvest);
  // The ranks of the other group this rank is the buddy of (rank r of it sends to r mod this
  // group's size).
  std::vector<int> SnapshotSources() const;

  // The engine's GradNormCombiner under schedule.gradient_clipping: exchanges the groups' squared
  // gradient norms for the step running (step_ + 1) and returns their sum.
  absl::StatusOr<double> CombineGradSquares(double group_squares);
  // With tensor parallelism: sums the engine groups' squares over the replica's ranks (each
  // parameter counted once: Engine::LeaveOutOfGradNorm), then combines as above under clipping.
  absl::StatusOr<double> CombineTensorParallelSquares(double squares);

  const Role role_;
  const jobspec::JobConfig job_;
  std::shared_ptr<const JobData> data_;
  Placement placement_;
  std::shared_ptr<transport::Transport> transport_;
  StageProgress* progress_;  // may be null
  data::Sampler sampler_;
  std::shared_ptr<torch::nn::Module> model_;
  // The group's communicator (the engine's) and placement_.parallel_communicator (null at
  // parallel 1), each counting the time its collectives keep this rank waiting.
  std::shared_ptr<engine::CountingCommunicator> communicator_;
  std::shared_ptr<engine::CountingCommunicator> counted_parallel_;
  double transfer_wait_s_ = 0;  // Await and WaitSends, since the stage was built
  std::unique_ptr<engine::Engine> engine_;
  at::ScalarType embedding_dtype_ = at::kFloat;
  int64_t step_ = 0;
  double tensor_parallel_squares_ = 0.0;  // the last step's, with tensor parallelism
  // An asynchronous save being written (stage.cc), and the snapshot of the last one, whose memory
  // the next copies into.
  struct PendingSave;
  std::unique_ptr<PendingSave> pending_save_;
  std::unique_ptr<engine::CheckpointSnapshot> reusable_snapshot_;
  // NOTE [Snapshots in memory] (snapshots.cc): what this rank holds, and the exchange of the last
  // snapshot while its copies are on their way.
  HeldSnapshots held_;
  struct SnapshotExchange {
    int64_t step = 0;
    at::Tensor size;  // this rank's snapshot's size, which its send reads
    std::vector<std::unique_ptr<transport::SendHandle>> sends;
    struct Incoming {
      int source = 0;  // its rank in the other group
      transport::TransferTag tag;
      std::string bytes;
    };
    std::vector<Incoming> incoming;
  };
  std::unique_ptr<SnapshotExchange> exchange_;
  struct PendingRestore {
    int64_t step = 0;
    HeldSnapshots held;
    int from_peer = -1;
    std::vector<int> send_to;
  };
  std::unique_ptr<PendingRestore> pending_restore_;
  // RestoreFromMemoryAtNextStep's restore, when the step begins.
  absl::Status RestoreFromMemory(PendingRestore restore);
};

// InternalError "<what>: <message>", without LibTorch's backtrace for a c10::Error.
absl::Status TorchError(std::string_view what, const std::exception& e);

// Held while a stage seeds LibTorch's global generator and initialises its model, so ranks built
// on several threads of one process start from their group's weights, as separate processes do.
std::mutex& ModelInitMutex();

// The two stages. `communicator` joins this rank's group (engine::CreateGroupCommunicator, or a
// single-rank one); `transport` reaches the other group's ranks. InvalidArgument for a job whose
// model or engine cannot be built.
absl::StatusOr<std::unique_ptr<Stage>> CreateVisionStage(
    const jobspec::JobConfig& job, std::shared_ptr<const JobData> data, Placement placement,
    std::shared_ptr<engine::Communicator> communicator,
    std::shared_ptr<transport::Transport> transport, StageProgress* progress = nullptr);
absl::StatusOr<std::unique_ptr<Stage>> CreateLlmStage(
    const jobspec::JobConfig& job, std::shared_ptr<const JobData> data, Placement placement,
    std::shared_ptr<engine::Communicator> communicator,
    std::shared_ptr<transport::Transport> transport, StageProgress* progress = nullptr);

}  // namespace tandem::step
