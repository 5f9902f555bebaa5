// The sequence-parallel vision encoder (NOTE [Sequence-parallel vision encoder] in
// models/vision_encoder.h) against the single-process model: ranks as threads over
// engine::FakeGroup, fp32.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "engine/fake_communicator.h"
#include "models/vision_encoder.h"
#include "parallel/layout.h"

namespace tandem::models {
namespace {

using ::testing::HasSubstr;

struct Case {
  std::string name;
  int size;
  VisionConfig config;
  bool recompute = false;
};

VisionConfig Config(int64_t image, int64_t patch, int64_t heads) {
  VisionConfig c;
  c.image_size = image;
  c.patch_size = patch;
  c.hidden = 8 * heads;
  c.heads = heads;
  c.mlp_hidden = 32;
  c.output_dim = 24;
  return c;
}

// CLIP under LLaVA: a class token, a pre-norm, the features of the last block but one without it.
VisionConfig ClipLike() {
  VisionConfig c = Config(6, 2, 2);
  c.layers = 3;
  c.class_token = true;
  c.patch_bias = false;
  c.pre_norm = true;
  c.activation = "quick_gelu";
  c.feature_layer = -2;
  c.drop_first_feature = true;
  return c;
}

std::vector<Case> Cases() {
  VisionConfig sincos = Config(16, 4, 4);
  sincos.positions = "sincos";
  return {
      {"SP 2, two grid rows per rank", 2, Config(16, 4, 2)},
      {"SP 4, sine-cosine positions, recompute", 4, sincos, /*recompute=*/true},
      {"SP 4, ranks' positions cross grid rows (9 of a 6 x 6 grid)", 4, Config(12, 2, 4)},
      {"SP 2, CLIP: class token, pre-norm, feature layer -2, first feature dropped", 2, ClipLike()},
  };
}

class VisionSequenceParallelTest : public ::testing::TestWithParam<Case> {
 protected:
  void SetUp() override { at::set_num_threads(1); }
};

// Each rank's output is its features of the single-process output; the sum of the ranks'
// parameter gradients is the single-process gradient.
TEST_P(VisionSequenceParallelTest, MatchesTheSingleProcessModel) {
  const Case& test = GetParam();
  const VisionConfig& config = test.config;
  torch::manual_seed(5);
  const at::Tensor images = torch::rand({2, config.channels, config.image_size, config.image_size});
  const at::Tensor weights = torch::randn({2, config.num_features(), config.output_dim});

  torch::manual_seed(0);
  VisionEncoder whole(config);
  const at::Tensor out = whole->forward(images);
  (out * weights).sum().backward();

  engine::FakeGroup group(test.size, parallel::ParallelGroupName(Role::kVision, 0));
  std::vector<VisionEncoder> ranks;
  for (int r = 0; r < test.size; ++r) {
    torch::manual_seed(0);
    ranks.emplace_back(config, parallel::ParallelGroup{group.rank(r), std::chrono::seconds(20)});
    ranks.back()->set_recompute(test.recompute);
  }
  std::vector<at::Tensor> outputs(test.size);
  std::vector<std::thread> threads;
  for (int r = 0; r < test.size; ++r) {
    threads.emplace_back([&, r] {
      const parallel::Range features = ranks[r]->feature_range();
      outputs[r] = ranks[r]->forward(images);
      (outputs[r] * weights.narrow(1, features.begin, features.size())).sum().backward();
    });
  }
  for (auto& thread : threads) thread.join();

  int64_t covered = 0;
  for (int r = 0; r < test.size; ++r) {
    const parallel::Range features = ranks[r]->feature_range();
    EXPECT_EQ(features.begin, covered) << "rank " << r;
    covered = features.end;
    ASSERT_EQ(outputs[r].sizes(), (std::vector<int64_t>{2, features.size(), config.output_dim}));
    EXPECT_TRUE(
        at::allclose(outputs[r], out.narrow(1, features.begin, features.size()), 1e-4, 1e-6))
        << "rank " << r << "'s features";
  }
  EXPECT_EQ(covered, config.num_features());
  for (const auto& item : whole->named_parameters()) {
    if (!item.value().grad().defined()) continue;  // a block after the feature layer
    at::Tensor sum = torch::zeros_like(item.value());
    for (auto& rank : ranks) {
      const at::Tensor grad = rank->named_parameters()[item.key()].grad();
      if (grad.defined()) sum += grad;
    }
    EXPECT_TRUE(at::allclose(sum, item.value().grad(), 1e-4, 1e-6))
        << item.key() << ": largest difference "
        << (sum - item.value().grad()).abs().max().item<double>();
  }
}

INSTANTIATE_TEST_SUITE_P(Layouts, VisionSequenceParallelTest, ::testing::ValuesIn(Cases()),
                         [](const ::testing::TestParamInfo<Case>& info) {
                           return "case" + std::to_string(info.index);
                         });

TEST(VisionSequenceParallel, RefusesSizesThatDoNotSplit) {
  engine::FakeGroup group(3, parallel::ParallelGroupName(Role::kVision, 0));
  const parallel::ParallelGroup rank0{group.rank(0), std::chrono::seconds(1)};
  EXPECT_NO_THROW(VisionEncoder(Config(12, 2, 3), rank0));  // 36 positions, 3 heads
  EXPECT_THAT([&] { VisionEncoder(Config(12, 2, 4), rank0); },
              ::testing::ThrowsMessage<c10::Error>(
                  HasSubstr("4 heads do not split over 3 sequence-parallel ranks")));
  EXPECT_THAT([&] { VisionEncoder(Config(16, 4, 3), rank0); },
              ::testing::ThrowsMessage<c10::Error>(HasSubstr(
                  "a sequence of 16 positions does not split over 3 sequence-parallel ranks")));
}

}  // namespace
}  // namespace tandem::models
