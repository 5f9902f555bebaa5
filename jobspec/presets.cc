#include "jobspec/presets.h"

#include <cstdint>

namespace tandem::jobspec {
namespace {

struct VisionShape {
  std::string_view name;
  int64_t image_size, patch_size, hidden, layers, heads, mlp_hidden;
};

// ViT-Ti-like toy for CPU tests; ViT-S/16 and ViT-B/16 as in "An Image is Worth 16x16 Words".
constexpr VisionShape kVisionShapes[] = {
    {"vit-tiny", 32, 8, 64, 2, 4, 256},
    {"vit-s16", 224, 16, 384, 12, 6, 1536},
    {"vit-b16", 224, 16, 768, 12, 12, 3072},
};

struct LlmShape {
  std::string_view name;
  int64_t hidden, layers, heads, kv_heads, mlp_hidden, max_seq_len;
  bool tie_embeddings;
};

// llm-tiny for CPU tests; llm-160m a GPT-2-small-sized Llama; llm-1b the TinyLlama-1.1B shape.
constexpr LlmShape kLlmShapes[] = {
    {"llm-tiny", 64, 2, 4, 4, 172, 64, true},
    {"llm-160m", 768, 12, 12, 12, 2048, 1024, true},
    {"llm-1b", 2048, 22, 32, 4, 5632, 2048, false},
};

template <typename Table>
std::string Names(const Table& table) {
  std::string names;
  for (const auto& shape : table) {
    if (!names.empty()) names += ", ";
    names += shape.name;
  }
  return names;
}

}  // namespace

std::optional<models::VisionConfig> VisionPreset(std::string_view name) {
  for (const VisionShape& shape : kVisionShapes) {
    if (shape.name != name) continue;
    // channels, positions ("learned") and norm_eps (1e-6) keep their defaults
    models::VisionConfig config;
    config.preset = std::string(name);
    config.image_size = shape.image_size;
    config.patch_size = shape.patch_size;
    config.hidden = shape.hidden;
    config.layers = shape.layers;
    config.heads = shape.heads;
    config.mlp_hidden = shape.mlp_hidden;
    return config;
  }
  return std::nullopt;
}

std::optional<models::LlmConfig> LlmPreset(std::string_view name) {
  for (const LlmShape& shape : kLlmShapes) {
    if (shape.name != name) continue;
    models::LlmConfig config;  // rope_theta (10000) and norm_eps (1e-5) keep their defaults
    config.preset = std::string(name);
    config.hidden = shape.hidden;
    config.layers = shape.layers;
    config.heads = shape.heads;
    config.kv_heads = shape.kv_heads;
    config.mlp_hidden = shape.mlp_hidden;
    config.max_seq_len = shape.max_seq_len;
    config.tie_embeddings = shape.tie_embeddings;
    return config;
  }
  return std::nullopt;
}

std::string VisionPresetNames() { return Names(kVisionShapes); }
std::string LlmPresetNames() { return Names(kLlmShapes); }

}  // namespace tandem::jobspec
