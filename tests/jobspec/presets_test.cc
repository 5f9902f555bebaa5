// Tests for jobspec/presets.cc: the published shapes, and that each preset passes validation.
#include "jobspec/presets.h"

#include "gtest/gtest.h"
#include "jobspec/job_spec.h"

namespace tandem::jobspec {
namespace {

TEST(Presets, VisionShapes) {
  std::optional<models::VisionConfig> tiny = VisionPreset("vit-tiny");
  ASSERT_TRUE(tiny);
  EXPECT_EQ(tiny->preset, "vit-tiny");
  EXPECT_EQ(tiny->image_size, 32);
  EXPECT_EQ(tiny->patch_size, 8);
  EXPECT_EQ(tiny->hidden, 64);
  EXPECT_EQ(tiny->layers, 2);
  EXPECT_EQ(tiny->heads, 4);
  EXPECT_EQ(tiny->mlp_hidden, 256);
  EXPECT_EQ(tiny->positions, "learned");
  EXPECT_EQ(tiny->channels, 3);

  std::optional<models::VisionConfig> s16 = VisionPreset("vit-s16");
  ASSERT_TRUE(s16);
  EXPECT_EQ(s16->image_size, 224);
  EXPECT_EQ(s16->patch_size, 16);
  EXPECT_EQ(s16->hidden, 384);
  EXPECT_EQ(s16->layers, 12);
  EXPECT_EQ(s16->heads, 6);
  EXPECT_EQ(s16->mlp_hidden, 1536);
  EXPECT_EQ(s16->num_patches(), 196);

  std::optional<models::VisionConfig> b16 = VisionPreset("vit-b16");
  ASSERT_TRUE(b16);
  EXPECT_EQ(b16->image_size, 224);
  EXPECT_EQ(b16->patch_size, 16);
  EXPECT_EQ(b16->hidden, 768);
  EXPECT_EQ(b16->layers, 12);
  EXPECT_EQ(b16->heads, 12);
  EXPECT_EQ(b16->mlp_hidden, 3072);
}

TEST(Presets, LlmShapes) {
  std::optional<models::LlmConfig> tiny = LlmPreset("llm-tiny");
  ASSERT_TRUE(tiny);
  EXPECT_EQ(tiny->preset, "llm-tiny");
  EXPECT_EQ(tiny->hidden, 64);
  EXPECT_EQ(tiny->layers, 2);
  EXPECT_EQ(tiny->heads, 4);
  EXPECT_EQ(tiny->kv_heads, 4);
  EXPECT_EQ(tiny->mlp_hidden, 172);
  EXPECT_EQ(tiny->max_seq_len, 64);
  EXPECT_TRUE(tiny->tie_embeddings);

  std::optional<models::LlmConfig> m160 = LlmPreset("llm-160m");
  ASSERT_TRUE(m160);
  EXPECT_EQ(m160->hidden, 768);
  EXPECT_EQ(m160->layers, 12);
  EXPECT_EQ(m160->heads, 12);
  EXPECT_EQ(m160->kv_heads, 12);
  EXPECT_EQ(m160->mlp_hidden, 2048);
  EXPECT_EQ(m160->max_seq_len, 1024);
  EXPECT_TRUE(m160->tie_embeddings);

  std::optional<models::LlmConfig> b1 = LlmPreset("llm-1b");  // TinyLlama-1.1B
  ASSERT_TRUE(b1);
  EXPECT_EQ(b1->hidden, 2048);
  EXPECT_EQ(b1->layers, 22);
  EXPECT_EQ(b1->heads, 32);
  EXPECT_EQ(b1->kv_heads, 4);
  EXPECT_EQ(b1->mlp_hidden, 5632);
  EXPECT_EQ(b1->max_seq_len, 2048);
  EXPECT_FALSE(b1->tie_embeddings);
  EXPECT_EQ(b1->rope_theta, 10000.0);
  EXPECT_EQ(b1->vocab_size, 0);
}

TEST(Presets, UnknownNameIsNullopt) {
  EXPECT_FALSE(VisionPreset("vit-huge"));
  EXPECT_FALSE(VisionPreset(""));
  EXPECT_FALSE(LlmPreset("vit-tiny"));
  EXPECT_EQ(VisionPresetNames(), "vit-tiny, vit-s16, vit-b16");
  EXPECT_EQ(LlmPresetNames(), "llm-tiny, llm-160m, llm-1b");
}

// Every preset satisfies the divisibility rules: each vision preset with the largest LLM (whose
// sequence fits 196 patches), each LLM preset with the tiny ViT.
TEST(Presets, EachPresetValidates) {
  for (const char* name : {"vit-tiny", "vit-s16", "vit-b16"}) {
    JobConfig config;
    config.name = "p";
    config.vision.model = *VisionPreset(name);
    config.llm.model = *LlmPreset("llm-1b");
    config.vision.model.output_dim = config.llm.model.hidden;
    EXPECT_TRUE(ValidateJobConfig(config).ok()) << name << ": " << ValidateJobConfig(config);
  }
  for (const char* name : {"llm-tiny", "llm-160m", "llm-1b"}) {
    JobConfig config;
    config.name = "p";
    config.vision.model = *VisionPreset("vit-tiny");
    config.llm.model = *LlmPreset(name);
    config.vision.model.output_dim = config.llm.model.hidden;
    EXPECT_TRUE(ValidateJobConfig(config).ok()) << name << ": " << ValidateJobConfig(config);
  }
}

}  // namespace
}  // namespace tandem::jobspec
