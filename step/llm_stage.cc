// The LLM group's half of the step (stage.h).
//
//   plan each micro-batch (step/batch_plan.h: this replica's samples, a row each or packed from
//   the vision ranks' token counts, NOTE [Packed text] in stage.h, and its block of the images)
//   -> encode this replica's samples -> expect every embedding slice of the step up front -> for
//   each micro-batch k: await its slices into one leaf (under llm.parallel.embeddings
//   "broadcast", the replica's first rank awaits them and broadcasts the leaf) -> loss =
//   cross-entropy sum over the labelled tokens (the caption, or the answers: data/text_codec.h) /
//   labelled tokens of the whole global batch (each replica counts its own samples' and the group
//   sums the counts) -> loss.backward() -> send leaf.grad() slices back to the vision ranks ->
//   engine step
//
// The loss and the engines' sum reduction make the group sums equal one process's gradients.
#include <torch/torch.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <mutex>
#include <optional>
#include <utility>

#include "common/status_macros.h"
#include "data/batch.h"
#include "data/caption_metrics.h"
#include "engine/engine.h"
#include "engine/safetensors.h"
#include "hf/pretrained_weights.h"
#include "models/any_res.h"
#include "models/llm.h"
#include "models/vision_encoder.h"
#include "parallel/collectives.h"
#include "step/stage.h"
#include "step/tensor_parallel_checkpoint.h"

namespace tandem::step {
namespace {

namespace fs = std::filesystem;
using transport::TransferKind;
using transport::TransferTag;

class LlmStage : public Stage {
 public:
  LlmStage(const jobspec::JobConfig& job, std::shared_ptr<const JobData> data, Placement placement,
           std::shared_ptr<transport::Transport> transport, StageProgress* progress)
      : Stage(Role::kLlm, job, std::move(data), std::move(placement), std::move(transport),
              progress) {}

  absl::Status Setup(std::shared_ptr<engine::Communicator> communicator) {
    auto config = job().llm.model;
    // From scratch the word tokenizer sizes the vocabulary and numbers the image token of
    // conversations (data::TextCodec::WordsAtMarks); a pretrained LLM keeps its own.
    if (job().llm.pretrained.empty()) {
      config.vocab_size = data().text->vocab_size();
      config.image_token_id = data().text->image_token_id();
    }
    {
      std::lock_guard<std::mutex> lock(ModelInitMutex());
      torch::manual_seed(LlmModelSeed(job().schedule.seed));
      model_ = models::Llm(
          config, parallel::ParallelGroup{placement().parallel_communicator, placement().timeout});
    }
    if (!job().llm.pretrained.empty())
      RETURN_IF_ERROR(hf::LoadPretrainedLlm(job().llm.pretrained, *model_));
    // Replicated parameters (norms) are counted in the gradient norm by the replica's first rank.
    std::vector<std::string> left_out;
    if (parallel_index() > 0) {
      for (const auto& item : model_->named_parameters()) {
        if (!model_->shards().count(item.key())) left_out.push_back(item.key());
      }
    }
    RETURN_IF_ERROR(Build(model_.ptr(), std::move(communicator), left_out));
    // Each rank's shards round stochastically with numbers of their own; what every rank of the
    // replica holds whole rounds alike on all of them (NOTE [Random streams] in engine_step.cc).
    for (const auto& [name, shard] : model_->shards()) {
      RETURN_IF_ERROR(engine().SetShardStream(name, parallel_index()));
    }
    model_->set_compute_dtype(engine().compute().activation_dtype);
    if (placement().rank == 0 && !placement().run_dir.empty()) {
      RETURN_IF_ERROR(SaveExtras(placement().run_dir));
    }
    return absl::OkStatus();
  }

 protected:
  absl::StatusOr<StepResult> Train(int64_t step,
                                   const std::vector<std::vector<int64_t>>& batches) override;
  absl::StatusOr<EvalCounts> EvaluateBatch(int64_t step, int64_t batch_index,
                                           const std::vector<int64_t>& indices) override;
  // The word tokenizer goes beside the weights, from rank 0 (a pretrained one stays in its
  // directory, which job.json names).
  absl::Status SaveExtras(const std::string& directory) override {
    if (placement().rank != 0 || data().text->words() == nullptr) return absl::OkStatus();
    return data().text->words()->Save((fs::path(directory) / "tokenizer.json").string());
  }

  int64_t parameters() const override {
    int64_t whole = 0;
    for (const auto& item : model_->named_parameters()) {
      const auto shard = model_->shards().find(item.key());
      const int64_t numel = item.value().numel();
      whole += shard == model_->shards().end()
                   ? numel
                   : numel / shard->second.range.size() * shard->second.full;
    }
    return whole;
  }

  // A checkpoint saved at another tensor-parallel degree is resharded into a scratch directory
  // first (step/tensor_parallel_checkpoint.h).
  absl::StatusOr<ResumePoint> LoadGroup(const std::string& checkpoint) override;

  // Tensor parallelism: every rank holds its shards; the first rank of replica 0 writes the whole
  // model, each split parameter summed over the replica from zero-padded shards.
  absl::Status ExportWeights(const std::string& path) override;

 private:
  // An empty [rows, patches, width] tensor in the dtype embeddings cross in.
  at::Tensor EmbeddingBuffer(int64_t rows) const {
    return HostBuffer({rows, patches(), width()}, embedding_dtype());
  }

  // The embedding slices of one micro-batch (NOTE [Parallel sets] in stage.h): from each vision
  // rank owning rows of `mine`, its positions of them; none on ranks past the first of a replica
  // under embeddings_broadcast(). With sequence parallelism a slice is not contiguous in `host`
  // [rows, patches, width]: it lands in a buffer of its own, copied into place by
  // ReceiveEmbeddings.
  struct Incoming {
    std::vector<TransferTag> tags;
    struct Staged {
      at::Tensor buffer;
      SampleRange rows;
      parallel::Range features;
    };
    std::vector<Staged> staged;
  };
  absl::StatusOr<Incoming> ExpectEmbeddings(TransferKind kind, int64_t step, int64_t micro_batch,
                                            const MicroBatchPlan& plan, const at::Tensor& host);
  // What this replica trains on of a micro-batch, on the device (`text` holds the replica's
  // samples alone, in the plan's order): a row each, or packed into rows of at most
  // data.pack_tokens positions (models::Packing), as long as the longest.
  struct RowBatch {
    at::Tensor tokens, labels;
    std::optional<models::Packing> packing;
    int64_t positions = 0;  // of the rows, padding included
    int64_t padding = 0;
  };
  absl::StatusOr<RowBatch> RowsOf(const MicroBatchPlan& plan, data::TokenBatch& text) const;
  // What the LLM reads of this replica's block of `plan`'s tiles [n, features, hidden]: the tiles
  // themselves, or with LLaVA-NeXT's tiles each image's arrangement (models/any_res.h), in the
  // order of the replica's samples and so of their image marks.
  at::Tensor ImageFeatures(const MicroBatchPlan& plan, const at::Tensor& tiles) const {
    if (plan.layouts.empty()) return tiles;
    std::vector<data::AnyResLayout> mine;
    for (const int64_t sample : plan.llm_samples[replica()]) {
      mine.insert(mine.end(), plan.layouts[sample].begin(), plan.layouts[sample].end());
    }
    return models::ArrangeAnyRes(tiles, mine, model_->image_newline());
  }
  // Awaits the slices into `host` and returns the embeddings on the device; under
  // embeddings_broadcast() the replica's first rank broadcasts them to the others (collective over
  // the replica: every rank calls it for the same micro-batches in the same order).
  absl::StatusOr<at::Tensor> ReceiveEmbeddings(const Incoming& incoming, const at::Tensor& host,
                                               SampleRange mine);
  // The positions of the image that vision rank `index` of a replica computes.
  parallel::Range Features(int index) const {
    return models::VisionFeatureRange(job().vision.model, placement().peer_parallel, index);
  }

  models::Llm model_{nullptr};
};

absl::StatusOr<StepResult> LlmStage::Train(int64_t step,
                                           const std::vector<std::vector<int64_t>>& batches) {
  StepResult result;
  const data::Dataset& train = *data().datasets.train;
  const data::TextCodec& codec = *data().text;
  const int64_t max_text = job().data.max_text_tokens,
                max_images = job().data.max_images_per_sample;
  const bool packed = job().data.pack_tokens > 0;
  // NOTE [Packed text]: packed, the rows are planned from the vision ranks' token counts.
  std::vector<int64_t> text_tokens;
  if (packed) {
    int64_t samples = 0;
    for (const auto& batch : batches) samples += static_cast<int64_t>(batch.size());
    ASSIGN_OR_RETURN(const at::Tensor counts,
                     ReceiveFromVision(TransferKind::kTextTokens, step, samples));
    const float* count = counts.data_ptr<float>();
    for (int64_t i = 0; i < samples; ++i) text_tokens.push_back(std::llround(count[i]));
  }
  // The loss divides by the target tokens of the whole global batch.
  std::vector<RowBatch> rows;
  int64_t global_targets = 0;
  std::vector<MicroBatchPlan> plans;
  std::vector<at::Tensor> hosts;  // where each micro-batch's embeddings land
  std::vector<Incoming> incoming(batches.size());
  size_t offset = 0;  // of micro-batch k's samples in text_tokens
  for (size_t k = 0; k < batches.size(); ++k) {
    if (packed) {
      const std::vector<int64_t> counts(text_tokens.begin() + offset,
                                        text_tokens.begin() + offset + batches[k].size());
      offset += batches[k].size();
      ASSIGN_OR_RETURN(plans.emplace_back(), Plan(train, batches[k], /*training=*/true, &counts));
    } else {
      // A row a sample, of one length: the plan needs no text.
      ASSIGN_OR_RETURN(plans.emplace_back(), Plan(train, batches[k], /*training=*/true));
    }
    // The replica encodes only the samples it trains on, in its rows' order.
    data::TokenBatch text;
    std::vector<int64_t> own;
    for (const int64_t sample : plans[k].llm_samples[replica()]) own.push_back(batches[k][sample]);
    if (own.empty()) {
      text.length = data::TokenRowLength(codec, max_text, max_images);
    } else {
      ASSIGN_OR_RETURN(text, data::MakeTokenBatch(train, own, codec, max_text, max_images));
    }
    for (size_t i = 0; packed && i < own.size(); ++i) {
      const int64_t planned = plans[k].text_tokens[plans[k].llm_samples[replica()][i]];
      if (text.lengths[i] != planned) {
        return absl::InternalError(
            absl::StrCat(train.Describe(own[i]), ": ", text.lengths[i],
                         " text tokens here, planned with the vision ranks' count of ", planned,
                         " (do both groups run the same tokenizer and chat template?)"));
      }
    }
    global_targets += text.targets;
    result.planned += plans[k].llm_costs[replica()];
    ASSIGN_OR_RETURN(rows.emplace_back(), RowsOf(plans[k], text));
  }
  // Each replica counted its own samples' targets: the group's sum is the batch's (each engine
  // group holds one rank of every replica). Before any transfer is expected: a rank whose
  // transfers were withdrawn (the other group failed) fails before the collective or after it,
  // never leaving the others waiting in it.
  ASSIGN_OR_RETURN(global_targets, SumOverGroup(global_targets));
  for (size_t k = 0; k < batches.size(); ++k) {
    const SampleRange images = MyImages(plans[k]);
    hosts.push_back(EmbeddingBuffer(images.size()));
    ASSIGN_OR_RETURN(incoming[k], ExpectEmbeddings(TransferKind::kEmbeddings, step,
                                                   static_cast<int64_t>(k), plans[k], hosts[k]));
  }
  // Only the replica's first rank sends gradients back and reports the loss: its peers compute the
  // same (NOTE [Parallel sets]).
  const bool speaks = parallel_index() == 0;
  std::vector<at::Tensor> grads;  // kept alive until their sends are waited for
  std::vector<std::unique_ptr<transport::SendHandle>> sends;
  for (size_t k = 0; k < batches.size(); ++k) {
    SetPhase("transfer");
    const SampleRange mine = MyImages(plans[k]);
    ASSIGN_OR_RETURN(const at::Tensor embeddings, ReceiveEmbeddings(incoming[k], hosts[k], mine));
    SetPhase("forward");
    at::Tensor leaf = embeddings.detach().requires_grad_(!vision_frozen());
    at::Tensor loss;
    {
      auto autocast = engine().Autocast();
      loss = models::ForwardLabelLoss(model_, ImageFeatures(plans[k], leaf), rows[k].tokens,
                                      rows[k].labels, rows[k].packing ? &*rows[k].packing : nullptr)
                 .sum /
             static_cast<double>(std::max<int64_t>(global_targets, 1));
    }
    SetPhase("backward");
    loss.backward();
    if (speaks) {
      result.loss += loss.item<double>();
      result.positions += rows[k].positions;
      result.padding += rows[k].padding;
    }
    // Text-only samples alone leave the leaf out of the graph: no gradient goes back.
    if (vision_frozen() || !speaks || mine.empty()) {
      SetPhase("optimizer");
      RETURN_IF_ERROR(engine().Step());
      continue;
    }
    const at::Tensor grad = ToHost(leaf.grad());
    SetPhase("transfer");
    for (const auto& [peer, overlap] : Overlaps(plans[k])) {
      for (int index = 0; index < placement().peer_parallel; ++index) {
        at::Tensor slice = Rows(grad, overlap, mine.begin);
        if (placement().peer_parallel > 1) {
          const parallel::Range features = Features(index);
          slice = slice.narrow(1, features.begin, features.size()).contiguous();
        }
        grads.push_back(slice);
        ASSIGN_OR_RETURN(auto send, Send(peer * placement().peer_parallel + index,
                                         Tag(TransferKind::kGradients, step,
                                             static_cast<int64_t>(k), overlap, placement().rank),
                                         slice, &result));
        sends.push_back(std::move(send));
      }
    }
    SetPhase("optimizer");
    RETURN_IF_ERROR(engine().Step());
  }
  SetPhase("transfer");
  RETURN_IF_ERROR(WaitSends(sends));
  return result;
}

absl::StatusOr<LlmStage::RowBatch> LlmStage::RowsOf(const MicroBatchPlan& plan,
                                                    data::TokenBatch& text) const {
  RowBatch rows;
  if (job().data.pack_tokens <= 0) {
    const TokenTensors mine = TokensOf(text);
    rows.tokens = mine.tokens.to(device());
    rows.labels = mine.labels.to(device());
    rows.positions = text.size * text.length;
    rows.padding = rows.positions;
    for (const int64_t length : text.lengths) rows.padding -= length;
    return rows;
  }
  // Row i holds the replica's samples [ends[i-1], ends[i]), the rows of `text` alike.
  std::vector<std::vector<int64_t>> packed_rows;
  int64_t begin = 0, longest = 1;
  for (const int64_t end : plan.llm_row_ends[replica()]) {
    std::vector<int64_t>& row = packed_rows.emplace_back();
    int64_t used = 0;
    for (int64_t i = begin; i < end; ++i) {
      row.push_back(i);
      used += text.lengths[i];
    }
    longest = std::max(longest, used);
    begin = end;
  }
  // The rows are as long as the longest needs (a multiple of 8, within data.pack_tokens), not
  // data.pack_tokens: a replica with few samples fills its last row partly.
  const int64_t length = std::min(job().data.pack_tokens, (longest + 7) / 8 * 8);
  ASSIGN_OR_RETURN(data::PackedBatch packed,
                   data::PackTokenBatch(text, packed_rows, length, data().text->pad_id()));
  const auto tensor = [&](std::vector<int64_t>& values) {
    return torch::from_blob(values.data(), {packed.rows, packed.length}, at::kLong)
        .clone()
        .to(device());
  };
  rows.tokens = tensor(packed.tokens);
  rows.labels = tensor(packed.labels);
  rows.packing = models::Packing{tensor(packed.positions), tensor(packed.segments)};
  rows.positions = packed.rows * packed.length;
  rows.padding = packed.padding;
  return rows;
}

absl::StatusOr<EvalCounts> LlmStage::EvaluateBatch(int64_t step, int64_t batch_index,
                                                   const std::vector<int64_t>& indices) {
  const data::Dataset& eval = *data().datasets.eval;
  ASSIGN_OR_RETURN(const MicroBatchPlan plan, Plan(eval, indices, /*training=*/false));
  const std::vector<int64_t>& samples = plan.llm_samples[replica()];
  if (samples.empty() && !collective_generation()) return EvalCounts{};
  const SampleRange mine = MyImages(plan);
  at::Tensor images = EmbeddingBuffer(mine.size());
  ASSIGN_OR_RETURN(const Incoming incoming, ExpectEmbeddings(TransferKind::kEvalEmbeddings, step,
                                                             batch_index, plan, images));
  ASSIGN_OR_RETURN(images, ReceiveEmbeddings(incoming, images, mine));
  // Every rank reads the whole batch's prompts, so that a bad sample fails every rank alike and all
  // agree on the number of tokens to generate: one past the longest answer. A rank without samples
  // still steps the generation (ZeRO-3 gathers are collective) with one placeholder row.
  const data::TextCodec& text = *data().text;
  ASSIGN_OR_RETURN(data::PromptBatch all,
                   data::MakePromptBatch(eval, indices, text, job().data.max_text_tokens,
                                         job().data.max_images_per_sample));
  int64_t longest = 0;
  for (const auto& answer : all.answers)
    longest = std::max(longest, static_cast<int64_t>(answer.size()));
  data::PromptBatch prompts;
  for (const int64_t sample : samples) {
    prompts.prompts.push_back(all.prompts[sample]);
    prompts.answers.push_back(all.answers[sample]);
  }
  if (samples.empty()) prompts.prompts = {{text.pad_id()}};
  std::vector<std::vector<int64_t>> generated;
  {
    auto autocast = engine().Autocast();
    generated = models::GenerateGreedyBatch(
        model_, mine.empty() ? at::Tensor() : ImageFeatures(plan, images), prompts.prompts,
        text.pad_id(), text.stop_ids(), std::min(longest + 1, job().data.max_text_tokens),
        /*stop_when_done=*/!collective_generation());
  }
  // The replica's first rank scores its samples; its peers generated the same.
  if (samples.empty() || parallel_index() != 0) return EvalCounts{};
  data::CaptionScore score;
  for (size_t row = 0; row < prompts.answers.size(); ++row) {
    // Within the sample's budget of text tokens, as in training.
    int64_t budget = job().data.max_text_tokens;
    if (plan.layouts.empty()) {
      budget += eval.ImageCount(indices[samples[row]]) * text.image_tokens();
    } else {
      for (const data::AnyResLayout& layout : plan.layouts[samples[row]])
        budget += layout.positions();
    }
    const size_t room = static_cast<size_t>(budget) - prompts.prompts[row].size();
    std::vector<int64_t> answer = generated[row];
    if (answer.size() > room) answer.resize(room);
    data::Accumulate(answer, prompts.answers[row], &score);
  }
  return EvalCounts{score.samples, score.exact, score.tokens_total, score.tokens_correct};
}

absl::StatusOr<LlmStage::Incoming> LlmStage::ExpectEmbeddings(TransferKind kind, int64_t step,
                                                              int64_t micro_batch,
                                                              const MicroBatchPlan& plan,
                                                              const at::Tensor& host) {
  Incoming incoming;
  if (embeddings_broadcast() && parallel_index() != 0)
    return incoming;  // the first rank's to receive
  const int parallel = placement().peer_parallel;
  const SampleRange mine = MyImages(plan);
  for (const auto& [peer, overlap] : Overlaps(plan)) {
    for (int index = 0; index < parallel; ++index) {
      const int source = peer * parallel + index;
      incoming.tags.push_back(Tag(kind, step, micro_batch, overlap, source));
      if (parallel == 1) {
        RETURN_IF_ERROR(Expect(incoming.tags.back(), Rows(host, overlap, mine.begin)));
        continue;
      }
      const parallel::Range features = Features(index);
      Incoming::Staged staged{at::empty({overlap.size(), features.size(), width()}, host.options()),
                              overlap, features};
      RETURN_IF_ERROR(Expect(incoming.tags.back(), staged.buffer));
      incoming.staged.push_back(std::move(staged));
    }
  }
  return incoming;
}

absl::StatusOr<at::Tensor> LlmStage::ReceiveEmbeddings(const Incoming& incoming,
                                                       const at::Tensor& host, SampleRange mine) {
  for (const TransferTag& tag : incoming.tags) RETURN_IF_ERROR(Await(tag));
  for (const Incoming::Staged& staged : incoming.staged) {
    Rows(host, staged.rows, mine.begin)
        .narrow(1, staged.features.begin, staged.features.size())
        .copy_(staged.buffer);
  }
  if (!embeddings_broadcast() || mine.empty()) return ToDevice(host);
  // On the device, where NCCL broadcasts; the first rank's embeddings overwrite the others'
  // buffers.
  at::Tensor embeddings =
      parallel_index() == 0
          ? ToDevice(host)
          : at::empty(host.sizes(), at::TensorOptions().dtype(host.scalar_type()).device(device()));
  RETURN_IF_ERROR(
      placement().parallel_communicator->Broadcast(embeddings, 0)->Wait(placement().timeout));
  return embeddings;
}

absl::StatusOr<ResumePoint> LlmStage::LoadGroup(const std::string& checkpoint) {
  ASSIGN_OR_RETURN(const int saved, SavedTensorParallelDegree(checkpoint));
  if (saved == placement().parallel) return Stage::LoadGroup(checkpoint);
  std::string pattern = (fs::temp_directory_path() / "tandem-reshard-XXXXXX").string();
  if (mkdtemp(pattern.data()) == nullptr) {
    return absl::UnavailableError(absl::StrCat("cannot create a scratch directory like ", pattern));
  }
  // Every rank of the engine's group loads (collective): they all read the same files.
  const absl::Status resharded = ReshardLlmCheckpoint(
      checkpoint, model_->config(), placement().parallel, parallel_index(), pattern);
  absl::StatusOr<ResumePoint> resume = absl::UnknownError("unset");
  if (!resharded.ok()) {
    resume = resharded;
  } else if (auto state = engine().LoadCheckpoint(pattern); state.ok()) {
    resume = ParseCheckpointClientState(*state, checkpoint);
  } else {
    resume = state.status();
  }
  std::error_code ec;
  fs::remove_all(pattern, ec);
  if (!resume.ok()) {
    return absl::Status(
        resume.status().code(),
        absl::StrCat("resuming ", checkpoint, " saved at llm.parallel.tensor ", saved, " at ",
                     placement().parallel, ": ", resume.status().message()));
  }
  return resume;
}

absl::Status LlmStage::ExportWeights(const std::string& path) {
  if (placement().parallel == 1) return Stage::ExportWeights(path);
  std::map<std::string, std::string> metadata;
  ASSIGN_OR_RETURN(engine::NamedTensors named, engine().ExportTensors(&metadata));
  if (replica() != 0) return absl::OkStatus();
  const parallel::ParallelGroup group{placement().parallel_communicator, placement().timeout};
  for (auto& [name, tensor] : named) {
    const auto shard = model_->shards().find(name);
    if (shard == model_->shards().end()) continue;
    std::vector<int64_t> shape = tensor.sizes().vec();
    shape[shard->second.dim] = shard->second.full;
    // On the group's device (NCCL reduces CUDA tensors); the export is written from the host.
    at::Tensor full = at::zeros(shape, tensor.options().device(device()));
    full.narrow(shard->second.dim, shard->second.range.begin, shard->second.range.size())
        .copy_(tensor);
    parallel::WaitOrThrow(group.comm->AllReduceSum(full), group);
    tensor = full.cpu();
  }
  if (parallel_index() != 0) return absl::OkStatus();
  return engine::WriteSafetensors(path, named, metadata);
}

}  // namespace

absl::StatusOr<std::unique_ptr<Stage>> CreateLlmStage(
    const jobspec::JobConfig& job, std::shared_ptr<const JobData> data, Placement placement,
    std::shared_ptr<engine::Communicator> communicator,
    std::shared_ptr<transport::Transport> transport, StageProgress* progress) {
  auto stage = std::make_unique<LlmStage>(job, std::move(data), std::move(placement),
                                          std::move(transport), progress);
  RETURN_IF_ERROR(stage->Setup(std::move(communicator)));
  return stage;
}

}  // namespace tandem::step
