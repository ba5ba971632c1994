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
#include "runtime/decode.hpp"
#include "runtime/driver.hpp"
#include "runtime/module_cache.hpp"
#include "runtime/tensor_checks.hpp"
#include "tests/gpu/gpu_test_util.hpp"
#include "tests/test_util.hpp"

using namespace graphattn;
using namespace graphattn::test;

namespace {

// W blocks per request, each request its own blocks.
constexpr int64_t H = 8, KH = 2, D = 128, B = 16, W = 32, NB = 8 * W;

// One batch of n requests of seq_len tokens each (q_len new tokens per request), in device memory,
// with a poisoned output and a KV cache of known bytes.
struct Batch {
  int n = 0, q_len = 1;
  int64_t T = 0;
  DeviceBuffer cache, q, out, key_bf16, value_bf16, key_fp16, value_fp16, slots, qsl, seq, table;
  std::vector<unsigned char> cache_before;
  KvDType kv = KvDType::kAuto;

  Batch(int requests, int new_tokens, int seq_len, KvDType kv_dtype)
      : n(requests), q_len(new_tokens), T(int64_t{requests} * new_tokens), kv(kv_dtype) {
    const int64_t elem = kv == KvDType::kAuto ? 2 : 1;
    cache = DeviceBuffer(2 * NB * B * KH * D * elem);
    q = DeviceBuffer(T * H * D * 2);
    out = DeviceBuffer(T * H * D * 2);
    for (DeviceBuffer* b : {&key_bf16, &value_bf16, &key_fp16, &value_fp16})
      *b = DeviceBuffer(T * KH * D * 2);
    // Small values in either 16-bit type: 0x3c00 is 1.0 in fp16, 0x3f80 1.0 in bf16.
    std::vector<uint16_t> ones_bf16(T * KH * D, 0x3f80), ones_fp16(T * KH * D, 0x3c00);
    std::vector<uint16_t> qh(T * H * D, 0x3f80);
    q.upload(qh.data(), qh.size() * 2);
    key_bf16.upload(ones_bf16.data(), ones_bf16.size() * 2);
    value_bf16.upload(ones_bf16.data(), ones_bf16.size() * 2);
    key_fp16.upload(ones_fp16.data(), ones_fp16.size() * 2);
    value_fp16.upload(ones_fp16.data(), ones_fp16.size() * 2);
    cache_before.assign(cache.bytes(), 0);
    for (size_t i = 0; i < cache_before.size(); ++i) cache_before[i] = static_cast<unsigned char>(i * 7 % 61);
    cache.upload(cache_before.data(), cache_before.size());
    out.fill_bytes(0xff);
    std::vector<int64_t> s(T);
    std::vector<int32_t> starts(n + 1), lens(n), bt(int64_t{n} * W);
    for (int r = 0; r < n; ++r) {
      starts[r + 1] = (r + 1) * q_len;
      lens[r] = seq_len;
      for (int b = 0; b < W; ++b) bt[r * W + b] = static_cast<int32_t>(r * W + b);
      for (int t = 0; t < q_len; ++t) {
        const int pos = seq_len - q_len + t;
        s[r * q_len + t] = int64_t{bt[r * W + pos / B]} * B + pos % B;
      }
    }
    slots = DeviceBuffer(T * 8);
    qsl = DeviceBuffer((n + 1) * 4);
    seq = DeviceBuffer(n * 4);
    table = DeviceBuffer(bt.size() * 4);
    slots.upload(s.data(), s.size() * 8);
    qsl.upload(starts.data(), starts.size() * 4);
    seq.upload(lens.data(), lens.size() * 4);
    table.upload(bt.data(), bt.size() * 4);
  }

  AttentionMetadata metadata(int decodes) const {
    AttentionMetadata md;
    md.query_start_loc = TensorView::contiguous(qsl.data(), ScalarType::kInt32, {n + 1});
    md.seq_lens = TensorView::contiguous(seq.data(), ScalarType::kInt32, {n});
    md.block_table = TensorView::contiguous(table.data(), ScalarType::kInt32, {n, W});
    md.slot_mapping = TensorView::contiguous(slots.data(), ScalarType::kInt64, {T});
    md.num_reqs = n;
    md.num_decodes = md.num_decode_tokens = decodes;
    md.num_actual_tokens = static_cast<int>(T);
    md.max_query_len = q_len;
    md.max_seq_len = W * B;
    return md;
  }
  ScalarType cache_type() const {
    return kv == KvDType::kFp8E4M3 ? ScalarType::kFloat8E4M3 : ScalarType::kBFloat16;
  }
  TensorView cache_view() const {
    return TensorView::contiguous(cache.data(), cache_type(), {2, NB, B, KH, D});
  }
  TensorView view(const DeviceBuffer& b, ScalarType t, int64_t heads) const {
    return TensorView::contiguous(b.data(), t, {T, heads, D});
  }
  bool cache_unchanged() const {
    GA_CU_CHECK(detail::driver().cuCtxSynchronize());
    std::vector<unsigned char> now(cache.bytes());
    cache.download(now.data(), now.size());
    return now == cache_before;
  }
};

AttentionLayerConfig layer(KvDType kv) {
  AttentionLayerConfig c;
  c.num_heads = static_cast<int>(H);
  c.num_kv_heads = static_cast<int>(KH);
  c.head_size = static_cast<int>(D);
  c.block_size = static_cast<int>(B);
  c.dtype = DType::kBFloat16;
  c.kv_dtype = kv;
  c.k_scale = c.v_scale = kv == KvDType::kAuto ? 1.0f : 0.05f;
  c.max_model_len = static_cast<int>(W * B);
  c.max_num_seqs = 8;
  return c;
}

}  // namespace

TEST_CASE("gpu kv dtype: every write path refuses keys and values of another 16-bit type") {
  GA_REQUIRE_GPU();
  TempKernelCache cache;
  for (KvDType kv : {KvDType::kFp8E4M3, KvDType::kAuto}) {
    INFO("KV cache " << to_string(kv));
    AttentionBackend attn(layer(kv));
    attn.prepare(cache);
    DeviceBuffer ws(attn.workspace_bytes());
    struct Path {
      const char* name;
      int requests, new_tokens, seq_len, decodes;
    };
    // Decode-only batches write inside the decode kernel (16-bit caches always, fp8 caches when
    // the launch splits) or with the cache write kernel; a batch with a prefill always runs the
    // cache write kernel before the prefill kernel.
    const Path paths[] = {{"decode only, one long request", 1, 1, W * B, 1},
                          {"decode only, 8 short requests", 8, 1, 40, 8},
                          {"prefill: cache write kernel", 2, 16, 100, 0}};
    for (const Path& p : paths) {
      INFO(p.name);
      Batch b(p.requests, p.new_tokens, p.seq_len, kv);
      const AttentionMetadata md = b.metadata(p.decodes);
      const TensorView qv = b.view(b.q, ScalarType::kBFloat16, H);
      const TensorView ov = b.view(b.out, ScalarType::kBFloat16, H);
      CHECK_THROWS_WITH_AS(
          attn.forward(qv, b.view(b.key_fp16, ScalarType::kFloat16, KH),
                       b.view(b.value_fp16, ScalarType::kFloat16, KH), b.cache_view(), ov, md,
                       ws.data(), ws.bytes(), nullptr),
          doctest::Contains("key dtype fp16 and value dtype fp16 must be the layer's bf16"),
          Error);
      CHECK_THROWS_WITH_AS(
          attn.forward(qv, b.view(b.key_bf16, ScalarType::kBFloat16, KH),
                       b.view(b.value_fp16, ScalarType::kFloat16, KH), b.cache_view(), ov, md,
                       ws.data(), ws.bytes(), nullptr),
          doctest::Contains("value dtype fp16"), Error);
      CHECK(b.cache_unchanged());
      // The same call in the layer's type goes through and writes the new rows.
      attn.forward(qv, b.view(b.key_bf16, ScalarType::kBFloat16, KH),
                   b.view(b.value_bf16, ScalarType::kBFloat16, KH), b.cache_view(), ov, md,
                   ws.data(), ws.bytes(), nullptr);
      CHECK_FALSE(b.cache_unchanged());
    }
    {
      INFO("launch_decode with a fused write, called directly");
      Batch b(1, 1, W * B, kv);
      const detail::LoadedKernel& k = detail::load_kernel(attn.required_specs()[1], cache);
      detail::DecodeLaunch a;
      a.query = b.view(b.q, ScalarType::kBFloat16, H);
      a.output = b.view(b.out, ScalarType::kBFloat16, H);
      a.kv_cache = b.cache_view();
      a.seq_lens = TensorView::contiguous(b.seq.data(), ScalarType::kInt32, {1});
      a.block_table = TensorView::contiguous(b.table.data(), ScalarType::kInt32, {1, W});
      a.num_decodes = 1;
      a.max_splits = 1;
      a.scale = 0.088f;
      a.k_scale = a.v_scale = 0.05f;
      a.slot_mapping = TensorView::contiguous(b.slots.data(), ScalarType::kInt64, {1});
      a.new_key = b.view(b.key_fp16, ScalarType::kFloat16, KH);
      a.new_value = b.view(b.value_fp16, ScalarType::kFloat16, KH);
      CHECK_THROWS_WITH_AS(detail::launch_decode(k, a, nullptr),
                           doctest::Contains("launch_decode: key dtype fp16"), Error);
      CHECK(b.cache_unchanged());
    }
  }
}
