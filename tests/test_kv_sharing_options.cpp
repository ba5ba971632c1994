// SPDX-License-Identifier: Apache-2.0
// AttentionLayerStack's KV sharing option (vLLM's kv_sharing_target_layer_name) is checked before
// anything is allocated, so its errors show on machines without a GPU too.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "graphattn/capture.hpp"
#include "graphattn/error.hpp"
#include "testing/configs.hpp"

using namespace graphattn;

namespace {

std::string error_of(std::vector<int> targets, int layers = 4) {
  AttentionLayerStack::Options o;
  for (int l = 0; l < layers; ++l) {
    AttentionLayerConfig c = test::layer_config(8, 2, 128, 1024, 16);
    c.arch = 90;
    o.layers.push_back(c);
  }
  o.max_tokens = 16;
  o.num_blocks = 64;
  o.max_blocks_per_seq = 64;
  o.kv_sharing_target = std::move(targets);
  try {
    AttentionLayerStack stack(o);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("layer stack: KV sharing targets must be earlier layers with their own cache") {
  CHECK(error_of({-1, 0}).find("kv_sharing_target has 2 entries; it must be empty or hold one "
                               "per layer (4)") != std::string::npos);
  CHECK(error_of({-1, 1, -1, -1})
            .find("kv_sharing_target[1] = 1 is not allowed; allowed: -1 "
                  "(its own cache) or an earlier layer (0..0)") != std::string::npos);
  CHECK(error_of({-1, -1, 3, -1}).find("kv_sharing_target[2] = 3") != std::string::npos);
  CHECK(error_of({-1, 0, 1, -1}).find("kv_sharing_target[2] = 1") !=
        std::string::npos);  // a target that itself shares
  CHECK(error_of({-2, -1, -1, -1}).find("kv_sharing_target[0] = -2") != std::string::npos);
}

TEST_CASE("layer stack: every layer has one decode query length") {
  AttentionLayerStack::Options o;
  for (int l = 0; l < 3; ++l) {
    AttentionLayerConfig c = test::layer_config(8, 2, 128, 1024, 16);
    c.arch = 90;
    c.decode_query_len = l == 2 ? 2 : 4;
    o.layers.push_back(c);
  }
  o.max_tokens = 16;
  o.num_blocks = 64;
  o.max_blocks_per_seq = 64;
  CHECK_THROWS_WITH_AS(AttentionLayerStack{o},
                       "layer 2 has decode_query_len 2 but layer 0 has 4; a step's decode "
                       "requests hold one query length for every layer",
                       Error);
}
