// Tensor and sequence parallelism through the whole service (docs/parallelism.md): `tandem run
// JOB` with llm.parallel.tensor and vision.parallel.sequence (actors as processes, Gloo
// communicators per dimension, embeddings and gradients over gRPC) gives, in fp32, the per-step
// losses of `tandem run JOB --colocated` within 1e-4 relative over 20 steps and its final
// parameters within 1e-5 relative (each tensor within 1e-4), for LLM TP 2 (two replicas) and TP 4,
// vision SP 2 (two replicas), and TP 2 x SP 2 (its embeddings sent to each tensor rank, and
// broadcast by a replica's first rank), with ZeRO stages 1 and 3 over the replicas: each layout at
// one stage, TP 2 x SP 2 with broadcast embeddings at both.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/safetensors.h"
#include "tests/service/run_losses.h"
#include "tests/service/service_testing.h"

namespace tandem {
namespace {

namespace fs = std::filesystem;
using testing::Losses;
constexpr int kSteps = 20;

struct Layout {
  int vision_actors, sequence, llm_actors, tensor;
  const char* embeddings = "each_rank";  // llm.parallel.embeddings
};

// The equivalence job of disaggregated_test.cc with a parallel layout; fp32 engines at ZeRO
// `stage`.
std::string JobSpec(const Layout& l, int stage) {
  const std::string engine = testing::Fp32Engine(stage);
  return absl::StrCat(R"({
  "name": "parallel",
  "data": {"shapes": {"seed": 5, "train_samples": 512, "eval_samples": 12}, "max_text_tokens": 12},
  "vision": {"actors": )",
                      l.vision_actors, R"(, "parallel": {"sequence": )", l.sequence,
                      R"(}, "model": {"preset": "vit-tiny"}, "engine": )", engine, R"(},
  "llm": {"actors": )",
                      l.llm_actors, R"(, "parallel": {"tensor": )", l.tensor,
                      R"(, "embeddings": ")", l.embeddings,
                      R"("}, "model": {"preset": "llm-tiny"}, "engine": )", engine, R"(},
  "schedule": {"global_batch": 12, "micro_batches": 2, "steps": )",
                      kSteps, R"(, "seed": 11, "eval_every": 10}
})");
}

std::map<std::string, at::Tensor> Weights(const std::string& path) {
  std::map<std::string, at::Tensor> weights;
  auto tensors = engine::ReadSafetensors(path);
  EXPECT_TRUE(tensors.ok()) << tensors.status();
  if (tensors.ok()) {
    for (auto& [name, tensor] : *tensors) weights[name] = tensor;
  }
  return weights;
}

// The final weights: the whole model within 1e-5 of the reference's norm, and each tensor within
// 1e-4 of its own. A tensor alone is held more loosely because some move by rounding noise: the key
// third of a vision qkv bias (and what reaches the norm1 bias through it) has a gradient that is
// zero in exact arithmetic, since adding a constant to every key leaves each query's softmax
// unchanged, and AdamW normalises that noise by sqrt(v) + eps into steps of up to lr * |g| / eps.
// Measured: single tensors up to 3.4e-5, the whole model well within 1e-5.
struct WeightErrors {
  double squared_error = 0, squared_norm = 0;
  void Add(const std::string& what, const at::Tensor& actual, const at::Tensor& expected) {
    const double error = (actual - expected).norm().item<double>(),
                 scale = expected.norm().item<double>();
    EXPECT_LE(error, 1e-4 * scale) << what << " differs by " << error / scale << " relative";
    squared_error += error * error;
    squared_norm += scale * scale;
  }
};

class ParallelServiceTest : public ::testing::TestWithParam<int> {
 protected:
  void SetUp() override {
    char pattern[] = "/tmp/tandem-parallel-XXXXXX";
    dir_ = mkdtemp(pattern);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // Runs `spec` (written as `name`.json) into dir_/`name`; "" on success, else its output.
  std::string Run(const std::string& name, const std::string& spec, const std::string& flags) {
    const std::string path = absl::StrCat(dir_, "/", name, ".json");
    std::ofstream(path) << spec;
    const testing::Outcome run = testing::Tandem(
        absl::StrCat("run ", path, " ", flags, " --threads 1 --run-dir ", dir_, "/", name));
    last_output_ = run.output;
    return run.exit_code == 0 ? "" : run.output;
  }

  std::string dir_, last_output_;
};

TEST_P(ParallelServiceTest, LossesAndFinalWeightsEqualColocated) {
  const int stage = GetParam();
  // The colocated run reads the same spec and runs one rank per group: the layout is ignored.
  ASSERT_EQ(Run("colocated", JobSpec({2, 2, 4, 2}, stage), "--colocated"), "");
  const std::vector<double> reference = Losses(dir_ + "/colocated");
  ASSERT_EQ(reference.size(), static_cast<size_t>(kSteps));
  const auto reference_vision = Weights(dir_ + "/colocated/vision.safetensors");
  const auto reference_llm = Weights(dir_ + "/colocated/llm.safetensors");
  ASSERT_FALSE(reference_llm.empty());

  const std::vector<Layout> layouts =
      stage == 1 ? std::vector<Layout>{{1, 1, 4, 2}, {4, 2, 1, 1}, {2, 2, 4, 2, "broadcast"}}
                 : std::vector<Layout>{{1, 1, 4, 4}, {2, 2, 4, 2}, {2, 2, 4, 2, "broadcast"}};
  for (const Layout& l : layouts) {
    const std::string name = absl::StrCat("vision", l.vision_actors, "-sp", l.sequence, "-llm",
                                          l.llm_actors, "-tp", l.tensor, "-", l.embeddings);
    SCOPED_TRACE(absl::StrCat(name, " at ZeRO stage ", stage));
    ASSERT_EQ(Run(name, JobSpec(l, stage), ""), "");
    // The summary's lines are lines, not escaped newlines.
    EXPECT_THAT(last_output_, ::testing::HasSubstr("\n  final loss"));
    EXPECT_THAT(last_output_, ::testing::Not(::testing::HasSubstr("\\x0a")));
    const std::vector<double> losses = Losses(dir_ + "/" + name);
    ASSERT_EQ(losses.size(), reference.size());
    for (size_t i = 0; i < losses.size(); ++i) {
      EXPECT_LE(std::abs(losses[i] - reference[i]), 1e-4 * std::abs(reference[i]))
          << "step " << i + 1 << ": " << losses[i] << " vs colocated " << reference[i];
    }
    // The export holds the whole model, assembled from the tensor-parallel shards.
    WeightErrors errors;
    for (const auto& [file, expected] :
         std::vector<std::pair<std::string, const std::map<std::string, at::Tensor>*>>{
             {"vision.safetensors", &reference_vision}, {"llm.safetensors", &reference_llm}}) {
      const auto weights = Weights(absl::StrCat(dir_, "/", name, "/", file));
      ASSERT_EQ(weights.size(), expected->size()) << file;
      for (const auto& [parameter, value] : *expected) {
        ASSERT_TRUE(weights.count(parameter)) << file << ": " << parameter;
        const at::Tensor& actual = weights.at(parameter);
        ASSERT_EQ(actual.sizes(), value.sizes()) << parameter;
        errors.Add(file + ": " + parameter, actual, value);
      }
    }
    EXPECT_LE(std::sqrt(errors.squared_error), 1e-5 * std::sqrt(errors.squared_norm))
        << "the whole model differs by " << std::sqrt(errors.squared_error / errors.squared_norm)
        << " relative";
  }
}

INSTANTIATE_TEST_SUITE_P(ZeroStages, ParallelServiceTest, ::testing::Values(1, 3));

}  // namespace
}  // namespace tandem
