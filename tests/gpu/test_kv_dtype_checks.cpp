// SPDX-License-Identifier: Apache-2.0
// New keys and values must come in the layer's dtype on every path that writes them into the KV
// cache, whatever the cache stores. Before the check, a bf16 layer with an fp8 cache accepted fp16
// key/value views in forward() and wrote their bits as bf16 into the cache (4063 of 4096 new
// elements wrong, no error). Each refused call must launch nothing: the cache is compared byte
// for byte afterwards; and the same call with the right dtype succeeds and writes, so a refusal
// is the dtype's doing.
#include <doctest/doctest.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "graphattn/graphattn.hpp"
#include "graphattn/runtime.hpp"
#include "runtime/decode.hpp"
#include "runtime/driver.hpp"
#include "runtime/module_cache.hpp"
#include "tests/gpu/forward_batch.hpp"
#include "tests/test_util.hpp"

using namespace graphattn;
using namespace graphattn::test;

TEST_CASE("gpu kv dtype: every write path refuses keys and values of another 16-bit type") {
  GA_REQUIRE_GPU();
  TempKernelCache cache;
  for (KvDType kv : {KvDType::kFp8E4M3, KvDType::kAuto}) {
    INFO("KV cache " << to_string(kv));
    constexpr int kMaxLen = 512;
    AttentionBackend attn(Batch::layer(kv, kMaxLen));
    attn.prepare(cache);
    DeviceBuffer ws(attn.workspace_bytes());
    struct Path {
      const char* name;
      int requests, new_tokens, seq_len, decodes;
    };
    // Decode-only batches write inside the decode kernel (16-bit caches always, fp8 caches when
    // the launch splits) or with the cache write kernel; a batch with a prefill always runs the
    // cache write kernel before the prefill kernel.
    const Path paths[] = {{"decode only, one long request", 1, 1, kMaxLen, 1},
                          {"decode only, 8 short requests", 8, 1, 40, 8},
                          {"prefill: cache write kernel", 2, 16, 100, 0}};
    for (const Path& p : paths) {
      INFO(p.name);
      Batch b(p.requests, p.new_tokens, p.seq_len, kv);
      const AttentionMetadata md = b.metadata(p.decodes);
      const TensorView qv = b.query(), ov = b.output();
      const int64_t KH = Batch::KH;
      CHECK_THROWS_WITH_AS(
          attn.forward(qv, b.view(b.key_fp16, ScalarType::kFloat16, KH),
                       b.view(b.value_fp16, ScalarType::kFloat16, KH), b.cache_view(), ov, md,
                       ws.data(), ws.bytes(), nullptr),
          doctest::Contains("key dtype fp16 and value dtype fp16 must be the layer's bf16"), Error);
      CHECK_THROWS_WITH_AS(attn.forward(qv, b.view(b.key_bf16, ScalarType::kBFloat16, KH),
                                        b.view(b.value_fp16, ScalarType::kFloat16, KH),
                                        b.cache_view(), ov, md, ws.data(), ws.bytes(), nullptr),
                           doctest::Contains("value dtype fp16"), Error);
      CHECK(b.cache_unchanged());
      // The same call in the layer's type goes through and writes the new rows.
      attn.forward(qv, b.keys(), b.values(), b.cache_view(), ov, md, ws.data(), ws.bytes(),
                   nullptr);
      CHECK_FALSE(b.cache_unchanged());
    }
    {
      INFO("launch_decode with a fused write, called directly");
      Batch b(1, 1, kMaxLen, kv);
      const detail::LoadedKernel& k = detail::load_kernel(attn.required_specs()[1], cache);
      detail::DecodeLaunch a;
      a.query = b.query();
      a.output = b.output();
      a.kv_cache = b.cache_view();
      a.seq_lens = TensorView::contiguous(b.seq.data(), ScalarType::kInt32, {1});
      a.block_table = TensorView::contiguous(b.table.data(), ScalarType::kInt32, {1, b.W});
      a.num_decodes = 1;
      a.max_splits = 1;
      a.scale = 0.088f;
      a.k_scale = a.v_scale = 0.05f;
      a.slot_mapping = TensorView::contiguous(b.slots.data(), ScalarType::kInt64, {1});
      a.new_key = b.view(b.key_fp16, ScalarType::kFloat16, Batch::KH);
      a.new_value = b.view(b.value_fp16, ScalarType::kFloat16, Batch::KH);
      CHECK_THROWS_WITH_AS(detail::launch_decode(k, a, nullptr),
                           doctest::Contains("launch_decode: key dtype fp16"), Error);
      CHECK(b.cache_unchanged());
    }
  }
}
