// SPDX-License-Identifier: Apache-2.0
// A batch for AttentionBackend::forward() in device memory, shared by the GPU tests that are
// about the API's contracts (dtype checks, threads, workspaces) rather than the numbers (those are
// compared with the float64 reference in test_decode.cpp and test_prefill.cpp): n requests of
// seq_len tokens with q_len new tokens each, every request with its own blocks; a KV cache of
// seeded random bytes that are finite in every KV type; new keys and values in both 16-bit types
// (bf16 and fp16 bits of the same small values); a query of seeded random bf16 values; an output
// poisoned with 0xff bytes (NaN).
#pragma once

#include <cstdint>
#include <random>
#include <vector>

#include "graphattn/graphattn.hpp"
#include "runtime/driver.hpp"
#include "testing/configs.hpp"

namespace graphattn::test {

struct Batch {
  static constexpr int64_t H = 8, KH = 2, D = 128, B = 16;  // 8 query heads, 2 KV heads
  int n = 0, q_len = 1;
  int64_t T = 0;   // new tokens
  int64_t W = 0;   // blocks per request
  int64_t NB = 0;  // blocks in the cache
  KvDType kv = KvDType::kAuto;
  DeviceBuffer cache, q, out, key_bf16, value_bf16, key_fp16, value_fp16, slots, qsl, seq, table;
  std::vector<unsigned char> cache_before;

  Batch(int requests, int new_tokens, int seq_len, KvDType kv_dtype, uint64_t seed = 1)
      : n(requests),
        q_len(new_tokens),
        T(int64_t{requests} * new_tokens),
        W((seq_len + B - 1) / B),
        NB(requests * W),
        kv(kv_dtype) {
    std::mt19937_64 rng(seed);
    const int64_t elem = kv == KvDType::kAuto ? 2 : 1;
    cache = DeviceBuffer(2 * NB * B * KH * D * elem);
    q = DeviceBuffer(T * H * D * 2);
    out = DeviceBuffer(T * H * D * 2);
    for (DeviceBuffer* b : {&key_bf16, &value_bf16, &key_fp16, &value_fp16})
      *b = DeviceBuffer(T * KH * D * 2);
    // 1.0 in each 16-bit type: 0x3f80 in bf16, 0x3c00 in fp16.
    const std::vector<uint16_t> ones_bf16(T * KH * D, 0x3f80), ones_fp16(T * KH * D, 0x3c00);
    key_bf16.upload(ones_bf16.data(), ones_bf16.size() * 2);
    value_bf16.upload(ones_bf16.data(), ones_bf16.size() * 2);
    key_fp16.upload(ones_fp16.data(), ones_fp16.size() * 2);
    value_fp16.upload(ones_fp16.data(), ones_fp16.size() * 2);
    // Query: bf16 with exponents of 0.25..2 and random signs and mantissas.
    std::vector<uint16_t> qh(T * H * D);
    for (auto& x : qh) x = static_cast<uint16_t>((rng() & 0x807f) | ((0x7d + rng() % 3) << 7));
    q.upload(qh.data(), qh.size() * 2);
    // Cache bytes below 0x3c: as bf16 pairs or fp8 bytes these are finite and small.
    cache_before.resize(cache.bytes());
    for (auto& c : cache_before) c = static_cast<unsigned char>(rng() % 0x3c);
    cache.upload(cache_before.data(), cache_before.size());
    out.fill_bytes(0xff);
    std::vector<int64_t> s(T);
    std::vector<int32_t> starts(n + 1), lens(n), bt(n * W);
    for (int r = 0; r < n; ++r) {
      starts[r + 1] = (r + 1) * q_len;
      lens[r] = seq_len;
      for (int64_t b = 0; b < W; ++b) bt[r * W + b] = static_cast<int32_t>(r * W + b);
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

  // The first `decodes` requests are decodes (q_len must be 1 then).
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
    md.max_seq_len = static_cast<int>(W * B);
    return md;
  }
  ScalarType cache_type() const {
    switch (kv) {
      case KvDType::kFp8E4M3:
        return ScalarType::kFloat8E4M3;
      case KvDType::kFp8E5M2:
        return ScalarType::kFloat8E5M2;
      default:
        return ScalarType::kBFloat16;
    }
  }
  TensorView cache_view() const {
    return TensorView::contiguous(cache.data(), cache_type(), {2, NB, B, KH, D});
  }
  // A [T, heads, D] view of one of the buffers.
  TensorView view(const DeviceBuffer& b, ScalarType t, int64_t heads) const {
    return TensorView::contiguous(b.data(), t, {T, heads, D});
  }
  TensorView query() const { return view(q, ScalarType::kBFloat16, H); }
  TensorView output() const { return view(out, ScalarType::kBFloat16, H); }
  TensorView keys() const { return view(key_bf16, ScalarType::kBFloat16, KH); }
  TensorView values() const { return view(value_bf16, ScalarType::kBFloat16, KH); }

  std::vector<unsigned char> output_bytes() const {
    std::vector<unsigned char> h(out.bytes());
    out.download(h.data(), h.size());
    return h;
  }
  bool cache_unchanged() const {
    GA_CU_CHECK(detail::driver().cuCtxSynchronize());
    std::vector<unsigned char> now(cache.bytes());
    cache.download(now.data(), now.size());
    return now == cache_before;
  }

  // A bf16 layer of these shapes whose requests can reach max_model_len tokens.
  static AttentionLayerConfig layer(KvDType kv, int max_model_len, int max_num_seqs = 8) {
    AttentionLayerConfig c = layer_config(static_cast<int>(H), static_cast<int>(KH),
                                          static_cast<int>(D), max_model_len, max_num_seqs);
    c.block_size = static_cast<int>(B);
    return with_kv(c, kv, 0.05f);
  }
};

}  // namespace graphattn::test
