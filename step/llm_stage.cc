// The LLM group's half of the step (stage.h).
//
//   expect every embedding slice of the step up front -> for each micro-batch k: await its slices
//   into one leaf -> loss = cross-entropy sum over the labelled tokens (the caption, or the
//   answers: data/text_codec.h) / labelled tokens of the whole global batch
//   -> loss.backward() -> send leaf.grad() slices back to the vision ranks -> engine step
//
// The loss and the engines' sum reduction make the group sums equal one process's gradients.
#include <torch/torch.h>

#include <filesystem>
#include <mutex>
#include <utility>

#include "common/status_macros.h"
#include "data/batch.h"
#include "data/caption_metrics.h"
#include "engine/engine.h"
#include "hf/pretrained_weights.h"
#include "models/llm.h"
#include "step/stage.h"

namespace tandem::step {
namespace {

namespace fs = std::filesystem;
using transport::TransferKind;
using transport::TransferTag;

class LlmStage : public Stage {
 public:
  LlmStage(const jobspec::JobConfig& job, std::shared_ptr<const JobData> data, Placement placement,
           std::shared_ptr<transport::Transport> transport, StageProgress* progress)
      : Stage("llm", job, std::move(data), std::move(placement), std::move(transport), progress) {}

  absl::Status Setup(std::shared_ptr<engine::Communicator> communicator) {
    auto config = job().llm.model;
    // From scratch the word tokenizer sizes the vocabulary; a pretrained LLM keeps its own.
    if (job().llm.pretrained.empty()) config.vocab_size = data().text->vocab_size();
    {
      std::lock_guard<std::mutex> lock(ModelInitMutex());
      torch::manual_seed(LlmModelSeed(job().schedule.seed));
      model_ = models::Llm(config);
    }
    if (!job().llm.pretrained.empty()) RETURN_IF_ERROR(hf::LoadPretrainedLlm(job().llm.pretrained, *model_));
    RETURN_IF_ERROR(Build(model_.ptr(), std::move(communicator)));
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

 private:
  // An empty [rows, patches, width] tensor in the dtype embeddings cross in.
  at::Tensor EmbeddingBuffer(int64_t rows) const {
    return at::empty({rows, patches(), width()}, at::TensorOptions().dtype(embedding_dtype()));
  }

  models::Llm model_{nullptr};
};

absl::StatusOr<StepResult> LlmStage::Train(int64_t step,
                                           const std::vector<std::vector<int64_t>>& batches) {
  StepResult result;
  const int64_t b = MicroBatchSize();
  const SampleRange mine = Mine(b);
  // Tokens of the whole global batch (text only): the loss divides by all its target tokens.
  std::vector<at::Tensor> tokens, labels;
  int64_t global_targets = 0;
  std::vector<at::Tensor> leaves;
  std::vector<std::vector<TransferTag>> tags(batches.size());
  for (size_t k = 0; k < batches.size(); ++k) {
    ASSIGN_OR_RETURN(data::TokenBatch text, data::MakeTokenBatch(*data().datasets.train, batches[k],
                                                                 *data().text, job().data.max_text_tokens));
    TokenTensors mb = TokensOf(text);
    global_targets += mb.targets;
    tokens.push_back(Rows(mb.tokens, mine, 0).to(device()));
    labels.push_back(Rows(mb.labels, mine, 0).to(device()));
    leaves.push_back(EmbeddingBuffer(mine.size()));
    for (const auto& [peer, overlap] : Overlaps(mine, b)) {
      TransferTag tag =
          Tag(TransferKind::kEmbeddings, step, static_cast<int64_t>(k), overlap, peer);
      RETURN_IF_ERROR(Expect(tag, Rows(leaves[k], overlap, mine.begin)));
      tags[k].push_back(tag);
    }
  }
  std::vector<at::Tensor> grads;
  std::vector<std::unique_ptr<transport::SendHandle>> sends;
  for (size_t k = 0; k < batches.size(); ++k) {
    SetPhase("transfer");
    for (const TransferTag& tag : tags[k]) RETURN_IF_ERROR(Await(tag, &result));
    SetPhase("forward");
    at::Tensor leaf = leaves[k].to(device()).detach().requires_grad_(!vision_frozen());
    at::Tensor loss;
    {
      auto autocast = engine().Autocast();
      at::Tensor logits = model_->forward(leaf, tokens[k]);
      loss = models::LabelLoss(logits, labels[k]).sum / static_cast<double>(std::max<int64_t>(global_targets, 1));
    }
    SetPhase("backward");
    loss.backward();
    result.loss += loss.item<double>();
    if (!vision_frozen()) {
      grads.push_back(leaf.grad().to(at::kCPU).contiguous());
      SetPhase("transfer");
    }
    for (const auto& [peer, overlap] : vision_frozen() ? std::vector<std::pair<int, SampleRange>>{}
                                                       : Overlaps(mine, b)) {
      ASSIGN_OR_RETURN(auto send, Send(peer, Tag(TransferKind::kGradients, step,
                                                 static_cast<int64_t>(k), overlap,
                                                 placement().rank),
                                       Rows(grads.back(), overlap, mine.begin), &result));
      sends.push_back(std::move(send));
    }
    SetPhase("optimizer");
    RETURN_IF_ERROR(engine().Step());
  }
  SetPhase("transfer");
  RETURN_IF_ERROR(WaitSends(sends));
  return result;
}

absl::StatusOr<EvalCounts> LlmStage::EvaluateBatch(int64_t step, int64_t batch_index,
                                                   const std::vector<int64_t>& indices) {
  const int64_t n = static_cast<int64_t>(indices.size());
  const SampleRange mine = Mine(n);
  if (mine.empty() && !collective_generation()) return EvalCounts{};
  at::Tensor images = EmbeddingBuffer(mine.size());
  std::vector<TransferTag> tags;
  for (const auto& [peer, overlap] : Overlaps(mine, n)) {
    tags.push_back(Tag(TransferKind::kEvalEmbeddings, step, batch_index, overlap, peer));
    RETURN_IF_ERROR(Expect(tags.back(), Rows(images, overlap, mine.begin)));
  }
  for (const TransferTag& tag : tags) RETURN_IF_ERROR(Await(tag, nullptr));
  // Every rank reads the whole batch's prompts, so that a bad sample fails every rank alike and all
  // agree on the number of tokens to generate: one past the longest answer. A rank without samples
  // still steps the generation (ZeRO-3 gathers are collective) with one placeholder row.
  const data::TextCodec& text = *data().text;
  ASSIGN_OR_RETURN(data::PromptBatch all,
                   data::MakePromptBatch(*data().datasets.eval, indices, text, job().data.max_text_tokens));
  int64_t longest = 0;
  for (const auto& answer : all.answers) longest = std::max(longest, static_cast<int64_t>(answer.size()));
  data::PromptBatch prompts;
  prompts.prompts.assign(all.prompts.begin() + mine.begin, all.prompts.begin() + mine.end);
  prompts.answers.assign(all.answers.begin() + mine.begin, all.answers.begin() + mine.end);
  if (mine.empty()) prompts.prompts = {{text.pad_id()}};
  const int64_t budget = text.image_tokens() + job().data.max_text_tokens;
  std::vector<std::vector<int64_t>> generated;
  {
    auto autocast = engine().Autocast();
    generated = models::GenerateGreedyBatch(model_, mine.empty() ? at::Tensor() : images.to(device()),
                                            prompts.prompts, text.pad_id(), text.stop_ids(),
                                            std::min(longest + 1, job().data.max_text_tokens),
                                            /*stop_when_done=*/!collective_generation());
  }
  if (mine.empty()) return EvalCounts{};
  data::CaptionScore score;
  for (size_t row = 0; row < prompts.answers.size(); ++row) {
    // Within the sample's budget of text tokens, as in training.
    const size_t room = static_cast<size_t>(budget) - prompts.prompts[row].size();
    std::vector<int64_t> answer = generated[row];
    if (answer.size() > room) answer.resize(room);
    data::Accumulate(answer, prompts.answers[row], &score);
  }
  return EvalCounts{score.samples, score.exact, score.tokens_total, score.tokens_correct};
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
