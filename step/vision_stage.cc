// The vision group's half of the step (stage.h).
//
//   forward(k) of this rank's images of micro-batch k (step/batch_plan.h) -> send each block an
//   LLM replica owns to its ranks -> ...
//   forward(k + depth - 1) ... -> await the gradients of k -> embeddings(k).backward(grad) -> step
// A frozen group (vision.freeze ["*"]) forwards without autograd and awaits no gradients; its
// engine step still runs, so the group's collectives (whole-model clipping's norm exchange) match.
//
// The stage runs ahead by up to kPipelineDepth micro-batches so both groups stay busy, and its
// ImagePrefetcher plans the step's micro-batches and the next step's and reads their images on a
// thread of its own (like a DataLoader's worker), so that rendering and decoding overlap the
// forward and backward passes (on a GPU, into pinned memory copied to the device without a wait).
#include <torch/torch.h>

#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "data/batch.h"
#include "data/worker_pool.h"
#include "engine/engine.h"
#include "hf/pretrained_weights.h"
#include "models/vision_encoder.h"
#include "step/image_prefetcher.h"
#include "step/stage.h"

namespace tandem::step {
namespace {

using transport::TransferKind;
using transport::TransferTag;
constexpr size_t kPipelineDepth = 2;  // vision micro-batches in flight

class VisionStage : public Stage {
 public:
  VisionStage(const jobspec::JobConfig& job, std::shared_ptr<const JobData> data,
              Placement placement, std::shared_ptr<transport::Transport> transport,
              StageProgress* progress)
      : Stage(Role::kVision, job, std::move(data), std::move(placement), std::move(transport),
              progress) {}

  absl::Status Setup(std::shared_ptr<engine::Communicator> communicator) {
    {
      std::lock_guard<std::mutex> lock(ModelInitMutex());
      torch::manual_seed(VisionModelSeed(job().schedule.seed));
      model_ = models::VisionEncoder(
          job().vision.model,
          parallel::ParallelGroup{placement().parallel_communicator, placement().timeout});
    }
    // hf::ResolvePretrainedModels gave the shape; the weights are the checkpoint's (the projector
    // stays as initialised for a tower alone).
    if (!job().vision.pretrained.empty())
      RETURN_IF_ERROR(
          hf::LoadPretrainedVision(job().vision.pretrained, *model_, job().vision.new_projector));
    RETURN_IF_ERROR(Build(model_.ptr(), std::move(communicator)));
    model_->set_compute_dtype(engine().compute().activation_dtype);
    // This rank's images of every micro-batch, into pinned memory where they go to a GPU.
    const bool pinned = device().is_cuda();
    workers_ = std::make_unique<data::WorkerPool>(static_cast<int>(job().data.workers));
    prefetcher_ = std::make_unique<ImagePrefetcher>(
        [this](const std::vector<int64_t>& indices) -> absl::StatusOr<PrefetchedBatch> {
          const data::Dataset& train = *data().datasets.train;
          if (skip_bad_samples()) return PlanSkipping(train, indices);
          PrefetchedBatch read;
          ASSIGN_OR_RETURN(read.plan, Plan(train, indices, /*training=*/true));
          read.planned = indices;
          return read;
        },
        [this, pinned](const std::vector<int64_t>& indices, PrefetchedBatch& read) -> absl::Status {
          const data::Dataset& train = *data().datasets.train;
          if (skip_bad_samples()) return ReadSkipping(train, indices, read, pinned);
          ASSIGN_OR_RETURN(read.images, ReadImages(train, indices, read.plan, pinned));
          return absl::OkStatus();
        },
        kPipelineDepth);
    return absl::OkStatus();
  }

 protected:
  absl::StatusOr<StepResult> Train(int64_t step,
                                   const std::vector<std::vector<int64_t>>& batches) override;
  absl::StatusOr<EvalCounts> EvaluateBatch(int64_t step, int64_t batch_index,
                                           const std::vector<int64_t>& indices) override;
  absl::Status FinishEvaluation() override;
  // NOTE [Bad samples] in stage.h: reads the step's micro-batches (prefetched, as a rule), keeping
  // those read whole for Train, and logs each bad sample once.
  absl::StatusOr<std::vector<float>> FindBadSamples(
      int64_t step, const std::vector<std::vector<int64_t>>& batches) override;
  // Vision rank 0 logs each bad sample once, with the error that made it bad: its own, or read
  // again when another replica read its images.
  void LogBadSamples(int64_t step, const std::vector<std::vector<int64_t>>& batches,
                     const std::vector<float>& flags) override;

 private:
  struct InFlight {
    at::Tensor embeddings;  // keeps its graph until backward
    at::Tensor sent;        // host copy the sends read from
    at::Tensor grad;        // host buffer the gradient slices land in
    std::vector<TransferTag> grad_tags;
    std::vector<std::unique_ptr<transport::SendHandle>> sends;
  };
  // This rank's images of micro-batch `indices` of `dataset` under `plan` ([n, 3, S, S], n may be
  // 0).
  absl::StatusOr<at::Tensor> ReadImages(const data::Dataset& dataset,
                                        const std::vector<int64_t>& indices,
                                        const MicroBatchPlan& plan, bool pinned) const {
    const SampleRange mine = MyImages(plan);
    std::vector<data::ImageRef> refs;
    for (int64_t i = mine.begin; i < mine.end; ++i) {
      const PlannedImage& unit = plan.images[i];
      refs.push_back({indices[unit.sample], unit.image, unit.tile});
    }
    const int64_t size = job().vision.model.image_size;
    if (refs.empty()) return at::zeros({0, 3, size, size});
    ASSIGN_OR_RETURN(data::Batch batch, data::MakeImagesBatch(dataset, refs, workers_.get()));
    return ImagesOf(batch, pinned);
  }
  // A training micro-batch under data.on_bad_sample "skip": planned with the samples that fail
  // their check left out (PrefetchedBatch::bad), then read, the samples whose images fail flagged.
  absl::StatusOr<PrefetchedBatch> PlanSkipping(const data::Dataset& train,
                                               const std::vector<int64_t>& indices) const;
  absl::Status ReadSkipping(const data::Dataset& train, const std::vector<int64_t>& indices,
                            PrefetchedBatch& read, bool pinned) const;
  // Sends `rows` of `embeddings` (rows of the exchange order; its first row is mine.begin) to every
  // rank of LLM replica `replica`, or to its first rank under embeddings_broadcast() (NOTE
  // [Parallel sets]).
  absl::Status SendToReplica(transport::TransferKind kind, int64_t step, int64_t micro_batch,
                             int replica, SampleRange rows, const at::Tensor& embeddings,
                             SampleRange mine, StepResult* result,
                             std::vector<std::unique_ptr<transport::SendHandle>>* sends);
  // Asks the prefetcher for the next step's micro-batches without advancing the sampler. A read
  // that fails is kept: the step that needs the batch returns its error.
  void PrefetchNextStep();
  absl::Status Finish(InFlight& f, StepResult* result);

  models::VisionEncoder model_{nullptr};
  // Evaluation embeddings still being sent, with the tensors the sends read from.
  std::deque<std::pair<at::Tensor, std::vector<std::unique_ptr<transport::SendHandle>>>>
      eval_sends_;
  // data.workers threads reading a micro-batch's images (with the prefetcher's or the stage's).
  std::unique_ptr<data::WorkerPool> workers_;
  // The step's micro-batches FindBadSamples read whole, by the indices they cover, for Train.
  std::map<std::vector<int64_t>, PrefetchedBatch> taken_;
  std::map<int64_t, absl::Status> found_;  // the bad samples this rank found in the step
  std::set<int64_t> logged_;               // bad samples logged already (rank 0)
  // Last: destroyed first, so its thread stops before what its reads use.
  std::unique_ptr<ImagePrefetcher> prefetcher_;
};

absl::StatusOr<StepResult> VisionStage::Train(int64_t step,
                                              const std::vector<std::vector<int64_t>>& batches) {
  StepResult result;
  const int64_t last = static_cast<int64_t>(batches.size()) - 1;
  std::map<std::vector<int64_t>, PrefetchedBatch> taken = std::move(taken_);
  taken_.clear();
  for (const auto& batch : batches) {
    if (!taken.count(batch)) prefetcher_->Request(batch);
  }
  // NOTE [Packed text]: the LLM ranks plan from the token counts this rank's plans hold.
  at::Tensor text_tokens;
  std::vector<std::unique_ptr<transport::SendHandle>> text_sends;
  if (job().data.pack_tokens > 0) {
    std::vector<float> counts;
    for (size_t k = 0; k < batches.size(); ++k) {
      MicroBatchPlan plan;
      if (auto it = taken.find(batches[k]); it != taken.end()) {
        plan = it->second.plan;
      } else {
        ASSIGN_OR_RETURN(plan, prefetcher_->PlanOf(batches[k]));
      }
      if (plan.text_tokens.size() != batches[k].size()) {
        return absl::DataLossError(absl::StrCat(
            "micro-batch ", k, ": planned ", plan.text_tokens.size(), " of its ", batches[k].size(),
            " samples (it was read whole when the step began: the data changed under the run)"));
      }
      counts.insert(counts.end(), plan.text_tokens.begin(), plan.text_tokens.end());
    }
    text_tokens = torch::tensor(counts, at::kFloat);
    RETURN_IF_ERROR(SendToLlmRanks(TransferKind::kTextTokens, step, text_tokens, &text_sends));
  }
  std::deque<InFlight> in_flight;
  for (int64_t k = 0; k <= last; ++k) {
    SetPhase("forward");
    // Planned where its images were read.
    PrefetchedBatch read;
    if (auto it = taken.find(batches[k]); it != taken.end()) {
      read = std::move(it->second);
      taken.erase(it);
    } else {
      ASSIGN_OR_RETURN(read, prefetcher_->Take(batches[k]));
      if (!read.bad.empty()) {
        return absl::DataLossError(absl::StrCat(
            "micro-batch ", k, ": ", read.bad.front().error.message(),
            " (it was read whole when the step began: the data changed under the run)"));
      }
    }
    const MicroBatchPlan& plan = read.plan;
    const at::Tensor& images = read.images;
    const SampleRange mine = MyImages(plan);
    result.planned += static_cast<double>(mine.size());
    InFlight f;
    {
      // A frozen group keeps no graph: nothing of it trains, and no gradient comes back.
      torch::AutoGradMode grad_mode(!vision_frozen());
      auto autocast = engine().Autocast();
      f.embeddings = model_->forward(images.to(device(), /*non_blocking=*/images.is_pinned()));
    }
    if (f.embeddings.scalar_type() != embedding_dtype()) {
      return absl::InternalError(absl::StrCat("vision embeddings are ",
                                              c10::toString(f.embeddings.scalar_type()),
                                              ", expected ", c10::toString(embedding_dtype())));
    }
    f.sent = ToHost(f.embeddings.detach());
    f.grad = HostBuffer(f.sent.sizes(), f.sent.scalar_type());
    SetPhase("transfer");
    for (const auto& [peer, overlap] : Overlaps(plan)) {
      if (!vision_frozen()) {
        // The gradient comes from the first rank of the LLM replica.
        TransferTag grad_tag =
            Tag(TransferKind::kGradients, step, k, overlap, peer * placement().peer_parallel);
        RETURN_IF_ERROR(Expect(grad_tag, Rows(f.grad, overlap, mine.begin)));
        f.grad_tags.push_back(grad_tag);
      }
      RETURN_IF_ERROR(SendToReplica(TransferKind::kEmbeddings, step, k, peer, overlap, f.sent, mine,
                                    &result, &f.sends));
    }
    in_flight.push_back(std::move(f));
    if (k == last && step < job().schedule.steps) PrefetchNextStep();
    while (in_flight.size() >= kPipelineDepth || (k == last && !in_flight.empty())) {
      RETURN_IF_ERROR(Finish(in_flight.front(), &result));
      in_flight.pop_front();
    }
  }
  SetPhase("transfer");
  RETURN_IF_ERROR(WaitSends(text_sends));
  return result;
}

absl::Status VisionStage::SendToReplica(
    TransferKind kind, int64_t step, int64_t micro_batch, int replica, SampleRange rows,
    const at::Tensor& embeddings, SampleRange mine, StepResult* result,
    std::vector<std::unique_ptr<transport::SendHandle>>* sends) {
  const int parallel = placement().peer_parallel;
  const int receivers = embeddings_broadcast() ? 1 : parallel;  // the first broadcasts them
  for (int peer = replica * parallel; peer < replica * parallel + receivers; ++peer) {
    ASSIGN_OR_RETURN(auto send, Send(peer, Tag(kind, step, micro_batch, rows, placement().rank),
                                     Rows(embeddings, rows, mine.begin), result));
    sends->push_back(std::move(send));
  }
  return absl::OkStatus();
}

absl::StatusOr<PrefetchedBatch> VisionStage::PlanSkipping(
    const data::Dataset& train, const std::vector<int64_t>& indices) const {
  PrefetchedBatch read;
  // Every rank finds the same: the sample's table and its images' headers (which LLaVA-NeXT's
  // tiles are planned from).
  for (size_t i = 0; i < indices.size(); ++i) {
    absl::Status status = train.Check(indices[i]);
    if (status.ok()) status = data::SampleImageSizes(train, indices[i], *data().text).status();
    if (!status.ok()) {
      read.bad.push_back({static_cast<int64_t>(i), std::move(status), /*everywhere=*/true});
      continue;
    }
    read.planned.push_back(indices[i]);
  }
  if (!read.planned.empty()) {
    ASSIGN_OR_RETURN(read.plan, Plan(train, read.planned, /*training=*/true));
  }
  return read;
}

absl::Status VisionStage::ReadSkipping(const data::Dataset& train,
                                       const std::vector<int64_t>& indices, PrefetchedBatch& read,
                                       bool pinned) const {
  const int64_t size = job().vision.model.image_size;
  read.images = at::zeros({0, 3, size, size});
  if (read.planned.empty()) return absl::OkStatus();
  // The positions among `indices` of the planned samples: those the plan did not leave out.
  std::vector<int64_t> positions;
  std::set<int64_t> left_out;
  for (const PrefetchedBatch::Bad& bad : read.bad) left_out.insert(bad.position);
  for (int64_t i = 0; i < static_cast<int64_t>(indices.size()); ++i) {
    if (!left_out.count(i)) positions.push_back(i);
  }
  // This rank's images: one that fails flags its sample, found by this replica alone.
  const SampleRange mine = MyImages(read.plan);
  std::vector<data::ImageRef> refs;
  for (int64_t i = mine.begin; i < mine.end; ++i) {
    const PlannedImage& unit = read.plan.images[i];
    refs.push_back({read.planned[unit.sample], unit.image, unit.tile});
  }
  if (refs.empty()) return absl::OkStatus();
  std::vector<absl::Status> failures;
  ASSIGN_OR_RETURN(data::Batch batch,
                   data::MakeImagesBatch(train, refs, workers_.get(), &failures));
  std::set<int64_t> flagged;
  for (int64_t i = mine.begin; i < mine.end; ++i) {
    const absl::Status& failure = failures[i - mine.begin];
    const int64_t sample = read.plan.images[i].sample;
    if (failure.ok() || !flagged.insert(sample).second) continue;
    read.bad.push_back({positions[sample], failure, /*everywhere=*/false});
  }
  if (flagged.empty()) read.images = ImagesOf(batch, pinned);
  return absl::OkStatus();
}

absl::StatusOr<std::vector<float>> VisionStage::FindBadSamples(
    int64_t step, const std::vector<std::vector<int64_t>>& batches) {
  taken_.clear();
  found_.clear();
  for (const auto& batch : batches) prefetcher_->Request(batch);
  std::vector<float> flags;
  for (const auto& batch : batches) {
    ASSIGN_OR_RETURN(PrefetchedBatch read, prefetcher_->Take(batch));
    const size_t offset = flags.size();
    flags.resize(offset + batch.size(), 0.0f);
    for (const PrefetchedBatch::Bad& bad : read.bad) {
      flags[offset + bad.position] = 1.0f;
      found_.emplace(batch[bad.position], bad.error);
    }
    if (!read.images_failed()) taken_.emplace(read.planned, std::move(read));
  }
  return flags;
}

void VisionStage::LogBadSamples(int64_t step, const std::vector<std::vector<int64_t>>& batches,
                                const std::vector<float>& flags) {
  if (placement().rank != 0) return;
  const data::Dataset& train = *data().datasets.train;
  size_t position = 0;
  for (const auto& batch : batches) {
    for (const int64_t index : batch) {
      if (flags[position++] <= 0 || !logged_.insert(index).second) continue;
      absl::Status error;
      if (const auto it = found_.find(index); it != found_.end()) {
        error = it->second;
      } else {
        error = train.Check(index);
        for (int64_t image = 0; error.ok() && image < train.ImageCount(index); ++image)
          error = train.GetTiles(index, image).status();
      }
      TANDEM_LOG(kWarning, "data")
          << "step " << step << ": skipping a bad sample (data.on_bad_sample \"skip\"): "
          << (error.ok() ? train.Describe(index) : error.message());
    }
  }
}

void VisionStage::PrefetchNextStep() {
  const data::Sampler::Position next = sampler().position();
  for (int64_t k = 0; k < job().schedule.micro_batches; ++k) {
    prefetcher_->Request(sampler().Next(MicroBatchSize()));
  }
  sampler().Seek(next);
}

absl::Status VisionStage::Finish(InFlight& f, StepResult* result) {
  SetPhase("transfer");
  for (const TransferTag& tag : f.grad_tags) RETURN_IF_ERROR(Await(tag));
  RETURN_IF_ERROR(WaitSends(f.sends));
  if (!vision_frozen()) {
    SetPhase("backward");
    f.embeddings.backward(ToDevice(f.grad));
  }
  SetPhase("optimizer");
  return engine().Step();
}

absl::StatusOr<EvalCounts> VisionStage::EvaluateBatch(int64_t step, int64_t batch_index,
                                                      const std::vector<int64_t>& indices) {
  const data::Dataset& eval = *data().datasets.eval;
  ASSIGN_OR_RETURN(const MicroBatchPlan plan, Plan(eval, indices, /*training=*/false));
  const SampleRange mine = MyImages(plan);
  if (mine.empty() && !collective_generation()) return EvalCounts{};
  ASSIGN_OR_RETURN(const at::Tensor images, ReadImages(eval, indices, plan, /*pinned=*/false));
  at::Tensor embeddings;
  {
    auto autocast = engine().Autocast();
    embeddings = ToHost(model_->forward(images.to(device())));
  }
  std::vector<std::unique_ptr<transport::SendHandle>> handles;
  for (const auto& [peer, overlap] : Overlaps(plan)) {
    RETURN_IF_ERROR(SendToReplica(TransferKind::kEvalEmbeddings, step, batch_index, peer, overlap,
                                  embeddings, mine, nullptr, &handles));
  }
  eval_sends_.emplace_back(embeddings, std::move(handles));
  while (eval_sends_.size() > kPipelineDepth) {
    RETURN_IF_ERROR(WaitSends(eval_sends_.front().second));
    eval_sends_.pop_front();
  }
  return EvalCounts{};
}

absl::Status VisionStage::FinishEvaluation() {
  absl::Status status;
  for (auto& [tensor, handles] : eval_sends_) status.Update(WaitSends(handles));
  eval_sends_.clear();
  return status;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Stage>> CreateVisionStage(
    const jobspec::JobConfig& job, std::shared_ptr<const JobData> data, Placement placement,
    std::shared_ptr<engine::Communicator> communicator,
    std::shared_ptr<transport::Transport> transport, StageProgress* progress) {
  auto stage = std::make_unique<VisionStage>(job, std::move(data), std::move(placement),
                                             std::move(transport), progress);
  RETURN_IF_ERROR(stage->Setup(std::move(communicator)));
  return stage;
}

}  // namespace tandem::step
