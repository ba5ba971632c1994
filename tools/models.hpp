// SPDX-License-Identifier: Apache-2.0
// Built-in model attention configurations for graphattn-warmup and the benchmarks.
#pragma once

#include <string>
#include <vector>

#include "graphattn/backend.hpp"

namespace graphattn::tools {

struct ModelConfig {
  std::string name;
  int num_layers = 0;
  int num_heads = 0;  // query heads
  int num_kv_heads = 0;
  int head_size = 0;
  int window = 0;                  // sliding window length, 0: none
  bool window_alternates = false;  // window on even layers only (gemma-2)
  float soft_cap = 0.0f;           // attention logit soft cap, 0: none
};

const std::vector<ModelConfig>& builtin_models();
// Throws graphattn::Error naming the model and listing the built-in ones.
const ModelConfig& find_model(const std::string& name);

// How an engine runs a model: what the kernels are specialized for beyond the model itself.
struct ModelRunSettings {
  int block_size = 16;
  DType dtype = DType::kBFloat16;
  KvDType kv_dtype = KvDType::kAuto;
  int max_model_len = 4096;
  int max_num_seqs = 64;
  int arch = 90;             // the target; 0 resolves to the current device when a backend is built
  int decode_query_len = 1;  // 1 + the speculative tokens a decode step verifies
};

// Reads the command-line names of the element types ("fp16"/"bf16", "auto"/"e4m3"/"e5m2");
// throws graphattn::Error naming the bad name and the allowed ones.
DType dtype_from_name(const std::string& name);
KvDType kv_dtype_from_name(const std::string& name);

// One attention configuration per layer (fp8 caches get a fixed scale of 0.05).
std::vector<AttentionLayerConfig> model_layer_configs(const ModelConfig& m,
                                                      const ModelRunSettings& s);
// Every distinct kernel those layers need, in first-use order. Needs no GPU when arch != 0.
std::vector<AttentionSpec> model_kernel_specs(const std::vector<AttentionLayerConfig>& layers);

}  // namespace graphattn::tools
