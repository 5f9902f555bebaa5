// hf::ExportRunAsLlava on a run directory made by hand (job.json, tokenizer.json and the final
// weights of randomly initialised models): the export loads as a LLaVA model, whose logits for
// [<image> x P, <bos>, words] equal the run's own models' for the image prefix and [<bos>, words],
// and `tandem generate` gives the same tokens from the run and from its export. transformers
// loading the export is checked by export_roundtrip_test.py.
#include "hf/export.h"

#include <gtest/gtest.h>
#include <torch/torch.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <optional>

#include "absl/strings/str_cat.h"
#include "data/image.h"
#include "data/tokenizer.h"
#include "engine/communicator.h"
#include "engine/engine.h"
#include "engine/safetensors.h"
#include "engine_config/config.h"
#include "hf/generate.h"
#include "hf/llava_model.h"
#include "hf/pretrained_job.h"
#include "hf/pretrained_weights.h"
#include "jobspec/job_spec.h"
#include "models/llm.h"
#include "models/vision_encoder.h"
#include "nlohmann/json.hpp"

namespace tandem::hf {
namespace {

namespace fs = std::filesystem;

class ExportTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::path(::testing::TempDir()) / ("hf_export_" + std::to_string(::getpid()));
    fs::remove_all(root_);
    run_ = root_ / "run";
    fs::create_directories(run_);
    ASSERT_TRUE(WriteText(run_ / "job.json", R"({"name": "tiny", "data": {"shapes": {}},
        "vision": {"model": {"preset": "vit-tiny", "positions": "sincos"}},
        "llm": {"model": {"preset": "llm-tiny"}}})"));
    auto read = jobspec::ReadJobSpecFile((run_ / "job.json").string());
    ASSERT_TRUE(read.ok()) << read.status();
    const std::optional<jobspec::JobConfig> resolved = read->config;
    const data::Tokenizer words =
        data::Tokenizer::Build({"a small red circle at the top left", "a large blue square"});
    ASSERT_TRUE(words.Save((run_ / "tokenizer.json").string()).ok());
    vision_config_ = resolved->vision.model;
    llm_config_ = resolved->llm.model;
    vision_config_.output_dim = llm_config_.hidden;
    llm_config_.vocab_size = words.size();
    torch::manual_seed(1);
    vision_ = models::VisionEncoder(vision_config_);
    llm_ = models::Llm(llm_config_);
    // Larger weights than the initialisation, so that generation does not repeat one token.
    torch::NoGradGuard no_grad;
    for (auto& p : llm_->parameters()) p.mul_(8);
    ASSERT_TRUE(WriteWeights(*vision_, run_ / "vision.safetensors"));
    ASSERT_TRUE(WriteWeights(*llm_, run_ / "llm.safetensors"));
  }
  void TearDown() override { fs::remove_all(root_); }

  static bool WriteText(const fs::path& path, const std::string& text) {
    std::ofstream out(path);
    out << text;
    return out.good();
  }
  static bool WriteWeights(const torch::nn::Module& module, const fs::path& path) {
    std::vector<std::pair<std::string, at::Tensor>> tensors;
    for (const auto& item : module.named_parameters())
      tensors.emplace_back(item.key(), item.value().detach());
    return engine::WriteSafetensors(path.string(), tensors).ok();
  }

  fs::path root_, run_;
  models::VisionConfig vision_config_;
  models::LlmConfig llm_config_;
  models::VisionEncoder vision_{nullptr};
  models::Llm llm_{nullptr};
};

TEST_F(ExportTest, TheExportComputesWhatTheRunsModelsCompute) {
  const fs::path out = root_ / "hf";
  ASSERT_TRUE(ExportRunAsLlava({run_.string(), out.string(), 40000}).ok());
  EXPECT_TRUE(fs::exists(out / "model.safetensors.index.json"));  // 40 kB shards
  auto llava = LoadLlava(out.string());
  ASSERT_TRUE(llava.ok()) << llava.status();
  const int64_t image_token = llm_config_.vocab_size;
  EXPECT_EQ(llava->config.llm->image_token_id, image_token);
  EXPECT_EQ(llava->tokenizer.TokenToId("<image>"), image_token);

  torch::NoGradGuard no_grad;
  torch::manual_seed(2);
  const at::Tensor images =
      torch::rand({1, 3, vision_config_.image_size, vision_config_.image_size});
  const at::Tensor ours_features = vision_->forward(images);
  const at::Tensor their_features = llava->vision->forward(images);
  EXPECT_TRUE(torch::allclose(their_features, ours_features, 1e-5, 1e-6));

  auto prompt = llava->tokenizer.Encode("<image> a small red circle");
  ASSERT_TRUE(prompt.ok());
  const int64_t patches = vision_config_.num_patches();
  ASSERT_EQ(prompt->size(), 6u);  // <image> a small red circle <bos>
  std::vector<int64_t> expanded(static_cast<size_t>(patches), image_token);
  expanded.push_back(data::Tokenizer::kBos);
  for (size_t i = 1; i + 1 < prompt->size(); ++i) expanded.push_back((*prompt)[i]);
  const at::Tensor theirs =
      llava->llm->forward(their_features, torch::tensor(expanded, torch::kLong).unsqueeze(0))
          .narrow(1, patches, 5);
  std::vector<int64_t> text{data::Tokenizer::kBos};
  for (size_t i = 1; i + 1 < prompt->size(); ++i) text.push_back((*prompt)[i]);
  const at::Tensor ours =
      llm_->forward(ours_features, torch::tensor(text, torch::kLong).unsqueeze(0));
  EXPECT_TRUE(torch::allclose(theirs.narrow(2, 0, llm_config_.vocab_size), ours, 1e-4, 1e-5));
  EXPECT_TRUE(torch::equal(theirs.select(2, image_token),
                           torch::zeros_like(theirs.select(2, image_token))));
}

TEST_F(ExportTest, GenerateGivesTheSameTokensFromTheRunAndFromItsExport) {
  const fs::path out = root_ / "hf";
  ASSERT_TRUE(ExportRunAsLlava({run_.string(), out.string()}).ok());
  data::Image image;
  image.height = image.width = vision_config_.image_size;
  image.pixels.assign(static_cast<size_t>(3 * image.height * image.width), 0.25f);
  for (size_t i = 0; i < image.pixels.size(); i += 7) image.pixels[i] = 0.9f;
  ASSERT_TRUE(data::WritePng(image, (root_ / "image.png").string()).ok());
  GenerateRequest request;
  request.images = {(root_ / "image.png").string()};
  request.prompt = "<image>";
  request.max_new_tokens = 8;
  request.model_dir = run_.string();
  auto from_run = Generate(request);
  ASSERT_TRUE(from_run.ok()) << from_run.status();
  request.model_dir = out.string();
  auto from_export = Generate(request);
  ASSERT_TRUE(from_export.ok()) << from_export.status();
  EXPECT_GT(from_run->token_ids.size(), 2u);  // more than an immediate <eos>
  EXPECT_EQ(from_run->token_ids, from_export->token_ids);
  EXPECT_EQ(from_run->text, from_export->text);
  EXPECT_EQ(from_run->prompt_tokens, vision_config_.num_patches() + 1);
  // The run's own greedy decoding of the same pixels, in its prefix layout.
  torch::NoGradGuard no_grad;
  auto decoded = data::DecodeImageFile(request.images[0]);
  ASSERT_TRUE(decoded.ok());
  const at::Tensor pixels =
      torch::from_blob(decoded->pixels.data(), {1, 3, image.height, image.width}).clone();
  const auto ours = models::GenerateGreedyCached(
      llm_, vision_->forward(pixels), {data::Tokenizer::kBos}, {data::Tokenizer::kEos}, 8);
  EXPECT_EQ(from_run->token_ids, ours);
}

// A checkpoint of bf16 ZeRO-1 engines of two ranks... of one rank here: the shards are read back by
// the export's own engine and gathered; the weights must be the checkpointed ones.
TEST_F(ExportTest, ACheckpointExportsItsOwnWeights) {
  const std::string engine_json =
      R"({"bf16": {"enabled": true, "bf16_master_weights_and_grads": true,
      "bf16_optimizer_states": true}, "zero_optimization": {"stage": 1},
      "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}}})";
  ASSERT_TRUE(WriteText(run_ / "job.json", absl::StrCat(R"({"name": "tiny", "data": {"shapes": {}},
        "vision": {"model": {"preset": "vit-tiny", "positions": "sincos"}, "engine": )",
                                                        engine_json, R"(},
        "llm": {"model": {"preset": "llm-tiny"}, "engine": )",
                                                        engine_json, "}}")));
  const fs::path checkpoint = run_ / "checkpoints" / "step-000001";
  fs::create_directories(checkpoint);
  fs::copy_file(run_ / "tokenizer.json", checkpoint / "tokenizer.json");
  auto config = engine_config::ParseConfigJson(nlohmann::json::parse(engine_json));
  ASSERT_TRUE(config.ok()) << config.status();
  std::map<std::string, at::Tensor> saved;
  for (const auto& [group, module] :
       std::vector<std::pair<std::string, std::shared_ptr<torch::nn::Module>>>{
           {"vision", vision_.ptr()}, {"llm", llm_.ptr()}}) {
    auto engine =
        engine::Engine::Create(module, engine::CreateSingleRankCommunicator(group), *config);
    ASSERT_TRUE(engine.ok()) << engine.status();
    ASSERT_TRUE((*engine)->SaveCheckpoint((checkpoint / group).string()).ok());
    auto gathered = (*engine)->GatherParameters();
    ASSERT_TRUE(gathered.ok());
    for (auto& [name, value] : *gathered) saved[group + "/" + name] = value;
  }
  std::ofstream(checkpoint / "complete") << "";
  const fs::path out = root_ / "hf";
  ASSERT_TRUE(ExportRunAsLlava({checkpoint.string(), out.string()}).ok());
  auto llava = LoadLlava(out.string());
  ASSERT_TRUE(llava.ok()) << llava.status();
  for (const auto& item : llava->llm->named_parameters()) {
    ASSERT_TRUE(saved.count("llm/" + item.key())) << item.key();
    at::Tensor expected = saved.at("llm/" + item.key());
    if (item.key() == "embed.weight") {
      EXPECT_TRUE(torch::equal(item.value().narrow(0, 0, expected.size(0)), expected))
          << item.key();
    } else {
      EXPECT_TRUE(torch::equal(item.value(), expected)) << item.key();
    }
  }
  for (const auto& item : llava->vision->named_parameters()) {
    if (item.key().rfind("post_norm.", 0) == 0) continue;  // the identity the export adds
    if (item.key() ==
        "positions") {  // the run's fixed sine-cosine table, a learned table in SigLIP
      EXPECT_TRUE(torch::equal(item.value(), vision_->named_buffers()["positions"]));
      continue;
    }
    ASSERT_TRUE(saved.count("vision/" + item.key())) << item.key();
    EXPECT_TRUE(torch::equal(item.value(), saved.at("vision/" + item.key()))) << item.key();
  }
  fs::remove(checkpoint / "complete");
  fs::remove_all(out);
  EXPECT_NE(ExportRunAsLlava({checkpoint.string(), out.string()})
                .message()
                .find("an incomplete checkpoint"),
            std::string::npos);
}

TEST_F(ExportTest, RefusesWhatItCannotWriteAndLeavesNothingBehind) {
  const fs::path out = root_ / "hf";
  fs::create_directories(out);
  EXPECT_EQ(ExportRunAsLlava({run_.string(), out.string()}).code(),
            absl::StatusCode::kAlreadyExists);
  fs::remove_all(out);
  ASSERT_TRUE(ExportRunAsLlava({run_.string(), out.string() + "/"}).ok());  // "dir/" names dir
  EXPECT_TRUE(fs::exists(out / "config.json"));
  fs::remove_all(out);
  EXPECT_EQ(ExportRunAsLlava({(root_ / "nothing").string(), out.string()}).code(),
            absl::StatusCode::kNotFound);
  fs::remove(run_ / "llm.safetensors");
  const absl::Status unfinished = ExportRunAsLlava({run_.string(), out.string()});
  EXPECT_EQ(unfinished.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(unfinished.message().find("no llm.safetensors: the run has not finished"),
            std::string::npos)
      << unfinished;
  EXPECT_EQ(ExportRunAsLlava({(run_ / "checkpoints").string(), out.string()}).code(),
            absl::StatusCode::kNotFound);
  EXPECT_FALSE(fs::exists(out));
  for (const auto& entry : fs::directory_iterator(root_)) {
    EXPECT_EQ(entry.path().filename().string().find(".hf.tmp"), std::string::npos) << entry.path();
  }
}

// A Llama without an "<image>" token (the llama fixture, its token renamed) as llm.pretrained: the
// job adds the token after the vocabulary with a zero embedding row, as LLaVA does, and the export
// carries the token in its tokenizer files, the row in its weights and the id in its config.
TEST_F(ExportTest, APretrainedLlmGainsAnImageTokenThatTheExportCarries) {
  const fs::path llama = root_ / "llama";
  fs::copy(std::string(TANDEM_HF_FIXTURES) + "/llama", llama);
  {
    // Its ids stay contiguous, as the tokenizers library numbers added tokens in order.
    nlohmann::json tokenizer = nlohmann::json::parse(std::ifstream(llama / "tokenizer.json"));
    int renamed = 0;
    for (auto& token : tokenizer["added_tokens"]) {
      if (token["content"] == "<image>") token["content"] = "<mask>", ++renamed;
    }
    ASSERT_EQ(renamed, 1);
    ASSERT_TRUE(WriteText(llama / "tokenizer.json", tokenizer.dump()));
  }
  fs::remove(run_ / "llm.safetensors");
  fs::remove(run_ / "tokenizer.json");
  ASSERT_TRUE(WriteText(run_ / "job.json", absl::StrCat(R"({"name": "tiny", "data": {"shapes": {}},
        "vision": {"model": {"preset": "vit-tiny", "positions": "sincos"}},
        "llm": {"pretrained": ")",
                                                        llama.string(), R"("}})")));
  auto read = jobspec::ReadJobSpecFile((run_ / "job.json").string());
  ASSERT_TRUE(read.ok()) << read.status();
  std::optional<jobspec::JobConfig> resolved = read->config;
  ASSERT_TRUE(ResolvePretrainedModels(*resolved).ok());
  const models::LlmConfig m = resolved->llm.model;
  EXPECT_EQ(m.image_token_id, 410);  // after the 410 tokens of config.json's vocabulary
  EXPECT_EQ(m.vocab_size, 411);
  EXPECT_EQ(resolved->vision.model.output_dim, m.hidden);

  models::Llm llm(m);
  ASSERT_TRUE(LoadPretrainedLlm(llama.string(), *llm).ok());
  auto theirs = engine::ReadSafetensors((llama / "model.safetensors").string());
  ASSERT_TRUE(theirs.ok()) << theirs.status();
  const std::map<std::string, at::Tensor> by_name(theirs->begin(), theirs->end());
  const at::Tensor embed = llm->named_parameters()["embed.weight"];
  EXPECT_TRUE(at::equal(embed.narrow(0, 0, 410), by_name.at("model.embed_tokens.weight")));
  EXPECT_EQ(embed[410].abs().sum().item<double>(), 0.0);
  models::VisionConfig v = resolved->vision.model;
  torch::manual_seed(2);
  models::VisionEncoder vision(v);
  ASSERT_TRUE(WriteWeights(*vision, run_ / "vision.safetensors"));
  ASSERT_TRUE(WriteWeights(*llm, run_ / "llm.safetensors"));

  const fs::path out = root_ / "hf";
  const absl::Status exported = ExportRunAsLlava({run_.string(), out.string()});
  ASSERT_TRUE(exported.ok()) << exported;
  auto llava = LoadLlava(out.string());
  ASSERT_TRUE(llava.ok()) << llava.status();
  EXPECT_EQ(llava->tokenizer.TokenToId("<image>"), 410);
  EXPECT_EQ(llava->config.llm->image_token_id, 410);
  EXPECT_EQ(llava->config.llm_model_type, "llama");
  EXPECT_TRUE(at::equal(llava->llm->named_parameters()["embed.weight"], embed));
  EXPECT_EQ(llava->tokenizer.chat_template(),
            tokenizer::HfTokenizer::Load(llama.string())->chat_template());
  const nlohmann::json config = nlohmann::json::parse(std::ifstream(out / "tokenizer_config.json"));
  EXPECT_EQ(config["bos_token"],
            nlohmann::json::parse(std::ifstream(llama / "tokenizer_config.json"))["bos_token"]);
}

}  // namespace
}  // namespace tandem::hf
