// Built-in model attention configurations for graphattn-warmup and the benchmarks.
#pragma once

#include <string>
#include <vector>

namespace graphattn::tools {

struct ModelConfig {
  std::string name;
  int num_layers = 0;
  int num_heads = 0;      // query heads
  int num_kv_heads = 0;
  int head_size = 0;
  int window = 0;               // sliding window length, 0: none
  bool window_alternates = false;  // window on even layers only (gemma-2)
  float soft_cap = 0.0f;        // attention logit soft cap, 0: none
};

const std::vector<ModelConfig>& builtin_models();
// Throws graphattn::Error naming the model and listing the built-in ones.
const ModelConfig& find_model(const std::string& name);

}  // namespace graphattn::tools
