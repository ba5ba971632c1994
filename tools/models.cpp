#include "tools/models.hpp"

#include "graphattn/error.hpp"

namespace graphattn::tools {

const std::vector<ModelConfig>& builtin_models() {
  static const std::vector<ModelConfig> models = {
      {"llama-3-8b", 32, 32, 8, 128, 0, false, 0.0f},
      {"qwen2.5-7b", 28, 28, 4, 128, 0, false, 0.0f},
      {"mistral-7b", 32, 32, 8, 128, 4096, false, 0.0f},
      {"gemma-2-9b", 42, 16, 8, 256, 4096, true, 50.0f},
  };
  return models;
}

const ModelConfig& find_model(const std::string& name) {
  std::string known;
  for (const auto& m : builtin_models()) {
    if (m.name == name) return m;
    known += (known.empty() ? "" : ", ") + m.name;
  }
  throw Error("unknown model '" + name + "'; built-in models: " + known);
}

}  // namespace graphattn::tools
