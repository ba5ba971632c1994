// SPDX-License-Identifier: Apache-2.0
#include "tools/models.hpp"

#include <algorithm>

#include "graphattn/error.hpp"
#include "graphattn/printable.hpp"

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
  throw Error("unknown model '" + printable(name) + "'; built-in models: " + known);
}

DType dtype_from_name(const std::string& name) {
  for (DType t : {DType::kFloat16, DType::kBFloat16})
    if (name == to_string(t)) return t;
  throw Error("dtype '" + printable(name) + "' is not supported; supported: fp16, bf16");
}

KvDType kv_dtype_from_name(const std::string& name) {
  for (KvDType t : {KvDType::kAuto, KvDType::kFp8E4M3, KvDType::kFp8E5M2})
    if (name == to_string(t)) return t;
  throw Error("KV cache dtype '" + printable(name) +
              "' is not supported; supported: auto, e4m3, e5m2");
}

std::vector<AttentionLayerConfig> model_layer_configs(const ModelConfig& m,
                                                      const ModelRunSettings& s) {
  std::vector<AttentionLayerConfig> out;
  for (int l = 0; l < m.num_layers; ++l) {
    AttentionLayerConfig c;
    c.num_heads = m.num_heads;
    c.num_kv_heads = m.num_kv_heads;
    c.head_size = m.head_size;
    c.block_size = s.block_size;
    c.dtype = s.dtype;
    c.kv_dtype = s.kv_dtype;
    c.window = m.window_alternates ? (l % 2 == 0 ? m.window : 0) : m.window;
    c.soft_cap = m.soft_cap;
    c.k_scale = c.v_scale = s.kv_dtype == KvDType::kAuto ? 1.0f : 0.05f;
    c.max_model_len = s.max_model_len;
    c.max_num_seqs = s.max_num_seqs;
    c.arch = s.arch;
    c.decode_query_len = s.decode_query_len;
    out.push_back(c);
  }
  return out;
}

std::vector<AttentionSpec> model_kernel_specs(const std::vector<AttentionLayerConfig>& layers) {
  std::vector<AttentionSpec> specs;
  for (const auto& c : layers)
    for (const auto& s : AttentionBackend(c).required_specs())
      if (std::find(specs.begin(), specs.end(), s) == specs.end()) specs.push_back(s);
  return specs;
}

}  // namespace graphattn::tools
