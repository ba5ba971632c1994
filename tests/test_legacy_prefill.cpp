// SPDX-License-Identifier: Apache-2.0
// The prefill kernel over vLLM's legacy PagedAttention caches (spec layout "legacy") and
// forward_prefix on the host: spec strings, the kernel selection, NVRTC builds across dtypes,
// head sizes, block sizes and score modifiers, and every argument check of forward_prefix (all
// before any device use).
#include <doctest/doctest.h>

#include <numeric>
#include <string>
#include <vector>

#include "graphattn/graphattn.hpp"
#include "jit_cache/nvrtc_compiler.hpp"
#include "jit_cache/prefill_kernels.hpp"
#include "runtime/prefill.hpp"
#include "templates/params.h"
#include "testing/legacy_layout.hpp"
#include "tests/test_util.hpp"

using namespace graphattn;
using test::error_of;
using test::fake_device;

// The one compile option of its own (jit_cache/render.cpp): ptxas -O1 for the sm_90 wgmma kernel
// over legacy caches at head 128 with one softmax body, measured faster on an H100; every other
// kernel keeps ptxas's default.
TEST_CASE("legacy prefill: ptxas -O1 for the one-body head-128 wgmma kernel, nowhere else") {
  const auto o1 = [](const std::string& text) {
    int n = 0;
    for (const std::string& o : render_kernel(AttentionSpec::parse(text)).options)
      n += o == "--ptxas-options=-O1";
    return n;
  };
  for (const char* with : {"prefill_h128_b16_bf16_kvauto_g4_swa0_cap0_legacy_sm90",
                           "prefill_h128_b32_fp16_kvauto_g8_swa1_cap0_legacy_sm90_sink",
                           "prefill_h128_b16_bf16_kvauto_g1_swa0_cap0_legacy_sm90_nc",
                           "prefill_h128_b16_bf16_kvauto_g4_swa0_cap0_legacy_sm90_chk"}) {
    INFO(with);
    CHECK(o1(with) == 1);
  }
  for (const char* without : {"prefill_h128_b16_bf16_kvauto_g4_swa0_cap0_nhd_sm90",
                              "prefill_h128_b16_bf16_kvauto_g4_swa0_cap0_hnd_sm90",
                              "prefill_h64_b16_bf16_kvauto_g4_swa0_cap0_legacy_sm90",
                              "prefill_h256_b16_bf16_kvauto_g4_swa0_cap0_legacy_sm90",
                              "prefill_h128_b16_bf16_kvauto_g4_swa0_cap1_legacy_sm90",
                              "prefill_h128_b16_bf16_kvauto_g4_swa0_cap0_legacy_sm90_alibi",
                              "prefill_h128_b16_bf16_kvauto_g4_swa0_cap0_legacy_sm90_bsp",
                              "prefill_h128_b16_bf16_kve4m3_g4_swa0_cap0_legacy_sm90",
                              "prefill_h128_b16_bf16_kvauto_g4_swa0_cap0_legacy_sm80",
                              "decode_h128_b16_bf16_kvauto_g4_swa0_cap0_legacy_sm90",
                              "cache_write_h128_b16_bf16_kvauto_g1_swa0_cap0_legacy_sm90"}) {
    INFO(without);
    CHECK(o1(without) == 0);
  }
  // The renderer's gate (jit_cache cannot include templates/params.h) is the kernel's own
  // one-body choice, ga_prefill_sm90_one_body, for the wgmma kernel over legacy caches.
  for (int head : {64, 128, 256})
    for (const char* layout : {"legacy", "nhd"})
      for (const char* kv : {"kvauto", "kve4m3"})
        for (const char* cap : {"cap0", "cap1"})
          for (const char* suffix : {"", "_alibi", "_bsp"}) {
            const std::string text = "prefill_h" + std::to_string(head) + "_b16_bf16_" + kv +
                                     "_g4_swa0_" + cap + "_" + layout + "_sm90" + suffix;
            INFO(text);
            const AttentionSpec spec = AttentionSpec::parse(text);
            const bool one_body_legacy_wgmma =
                detail::select_prefill_kernel(spec) == detail::PrefillKernel::kWgmma &&
                spec.layout == KvLayout::kLegacy &&
                ga_prefill_sm90_one_body(spec.head_size, true, spec.q_fp8, spec.soft_cap,
                                         spec.alibi, spec.block_sparse);
            CHECK(o1(text) == (one_body_legacy_wgmma ? 1 : 0));
          }
}

TEST_CASE("legacy prefill: spec strings, and which kernel serves them") {
  const char* text = "prefill_h128_b16_bf16_kvauto_g4_swa0_cap0_legacy_sm90";
  const AttentionSpec s = AttentionSpec::parse(text);
  CHECK(s.layout == KvLayout::kLegacy);
  CHECK(s.kind == KernelKind::kPrefill);
  CHECK(s.to_string() == text);
  // On sm_90 16-bit legacy caches of head sizes that are multiples of 64 take the wgmma kernel
  // as the flash layout does; fp8 caches, other head sizes and other archs the mma.sync one.
  AttentionSpec flash = s;
  flash.layout = KvLayout::kNHD;
  CHECK(detail::select_prefill_kernel(flash) == detail::PrefillKernel::kWgmma);
  CHECK(detail::select_prefill_kernel(s) == detail::PrefillKernel::kWgmma);
  CHECK(detail::select_prefill_kernel(AttentionSpec::parse(std::string(text) + "_bsp")) ==
        detail::PrefillKernel::kWgmma);
  const detail::PrefillConfig cfg = detail::prefill_config(s);
  CHECK(cfg.block_m == ga_prefill_sm90_block_m(128));
  CHECK(cfg.shared_bytes == ga_prefill_sm90_smem_bytes(128));
  CHECK(render_kernel(s).options.front() == "--gpu-architecture=sm_90a");
  for (const char* other : {"prefill_h128_b16_bf16_kve4m3_g4_swa0_cap0_legacy_sm90",
                            "prefill_h80_b16_bf16_kvauto_g4_swa0_cap0_legacy_sm90",
                            "prefill_h128_b16_bf16_kvauto_g4_swa0_cap0_legacy_sm89"}) {
    INFO(other);
    const AttentionSpec o = AttentionSpec::parse(other);
    CHECK(detail::select_prefill_kernel(o) == detail::PrefillKernel::kMmaSync);
    CHECK(detail::prefill_config(o).shared_bytes ==
          ga_prefill_smem_bytes(o.head_size, o.kv_dtype != KvDType::kAuto));
  }
  CHECK(AttentionSpec::parse("prefill_h80_b32_fp16_kve4m3_g1_swa0_cap1_legacy_sm80_alibi_sink_nc")
            .non_causal);
  // Still refused: fp8 head sizes in part-chunks, dense K/V in the legacy layout.
  CHECK(error_of([] {
          AttentionSpec::parse("prefill_h120_b16_bf16_kve4m3_g1_swa0_cap0_legacy_sm90");
        }).find("head size 120 is not supported by the legacy layout with KV cache dtype e4m3") !=
        std::string::npos);
  CHECK(error_of([] {
          AttentionSpec::parse("prefill_h128_b16_bf16_kvauto_g1_swa0_cap0_legacy_sm90_nc_dense");
        }).find("dense KV (_dense) reads no paged cache") != std::string::npos);
}

TEST_CASE("legacy prefill: NVRTC builds the kernel across dtypes, head and block sizes, modes") {
  std::vector<std::string> specs;
  for (int h : {32, 64, 80, 96, 112, 120, 128, 192, 256})
    specs.push_back("prefill_h" + std::to_string(h) + "_b16_bf16_kvauto_g4_swa0_cap0_legacy_sm90");
  for (int h : {64, 80, 128, 256})
    for (const char* kv : {"e4m3", "e5m2"})
      specs.push_back("prefill_h" + std::to_string(h) + "_b32_fp16_kv" + kv +
                      "_g8_swa1_cap0_legacy_sm89");
  for (const char* s : {"prefill_h128_b32_fp16_kvauto_g1_swa0_cap0_legacy_sm80_nc",
                        "prefill_h64_b16_bf16_kvauto_g8_swa1_cap1_legacy_sm90_alibi_sink",
                        "prefill_h256_b128_bf16_kve4m3_g2_swa0_cap0_legacy_sm90_alibi_nc",
                        "prefill_h120_b256_fp16_kvauto_g1_swa1_cap0_legacy_sm80_sink_chk",
                        "prefill_h96_b64_bf16_kve5m2_g1_swa0_cap1_legacy_sm90_chk",
                        "prefill_h128_b48_fp16_kvauto_g4_swa1_cap0_legacy_sm90",
                        "prefill_h192_b80_bf16_kve4m3_g1_swa0_cap0_legacy_sm80"})
    specs.push_back(s);
  for (const std::string& text : specs) {
    INFO(text);
    const KernelSource src = render_kernel(AttentionSpec::parse(text));
    CHECK(src.source.find("constexpr int KV_LAYOUT = 2;") != std::string::npos);
    test::check_cubin_builds(src);
  }
}

namespace {

// A valid forward_prefix call on fake device memory (never launched: each test case breaks one
// argument, which must fail before any device use): 3 requests, 8 query heads over 2 KV heads of
// size 128, bf16, 16-token blocks.
struct PrefixCall {
  ScalarType t = ScalarType::kBFloat16;
  TensorView kv = TensorView::contiguous(fake_device(0x100000), t, {2, 10, 16 * 2 * 128});
  PagedKvCache caches = split_paged_kv_cache(kv, 2, 128);
  TensorView query = TensorView::contiguous(fake_device(0x400000), t, {12, 8, 128});
  TensorView key = TensorView::contiguous(fake_device(0x500000), t, {12, 2, 128});
  TensorView value = key;
  TensorView output = TensorView::contiguous(fake_device(0x600000), t, {12, 8, 128});
  TensorView block_tables =
      TensorView::contiguous(fake_device(0x700000), ScalarType::kInt32, {3, 4});
  TensorView query_start_loc =
      TensorView::contiguous(fake_device(0x710000), ScalarType::kInt32, {4});
  TensorView seq_lens = TensorView::contiguous(fake_device(0x720000), ScalarType::kInt32, {3});
  std::string kv_cache_dtype = "auto";
  int max_query_len = 8;
  const float* alibi = nullptr;
  int window = 0;
  float k_scale = 1.0f, v_scale = 1.0f;
  PrefixOptions options;

  std::string error() const {
    return error_of([&] {
      forward_prefix(query, key, value, kv_cache_dtype, caches.key_cache, caches.value_cache,
                     block_tables, query_start_loc, seq_lens, max_query_len, alibi, window, k_scale,
                     v_scale, output, nullptr, default_kernel_cache(), options);
    });
  }
};

bool has(const std::string& text, const std::string& part) {
  if (text.find(part) != std::string::npos) return true;
  MESSAGE("'" << part << "' is not in: " << text);
  return false;
}

}  // namespace

TEST_CASE("legacy prefill: forward_prefix names every bad argument before touching a device") {
  {
    PrefixCall c;
    c.kv_cache_dtype = "fp8_e4m3fn";
    CHECK(c.error() ==
          "kv_cache_dtype \"fp8_e4m3fn\" is not supported; supported: auto, fp8, fp8_e4m3, "
          "fp8_e5m2");
  }
  for (const char* name : {"fp8", "fp8_e4m3", "fp8_e5m2"}) {  // a bf16 cache is "auto"
    PrefixCall c;
    c.kv_cache_dtype = name;
    CHECK(has(c.error(), "key_cache dtype bf16 does not hold kv_cache_dtype '" + std::string(name) +
                             "' for a bf16 query"));
  }
  {  // an e5m2 cache named "fp8" (= e4m3), and one named "auto"
    PrefixCall c;
    c.kv = TensorView::contiguous(fake_device(0x100000), ScalarType::kFloat8E5M2,
                                  {2, 10, 16 * 2 * 128});
    c.caches = split_paged_kv_cache(c.kv, 2, 128);
    c.kv_cache_dtype = "fp8";
    CHECK(has(c.error(), "key_cache dtype fp8_e5m2 does not hold kv_cache_dtype 'fp8'"));
    c.kv_cache_dtype = "auto";
    CHECK(has(c.error(), "does not hold kv_cache_dtype 'auto'"));
    // Named right, it gets as far as its fp8 scales.
    c.kv_cache_dtype = "fp8_e5m2";
    c.k_scale = 0.0f;
    CHECK(has(c.error(), "k_scale"));
  }
  {
    PrefixCall c;
    c.query = TensorView::contiguous(fake_device(0x400000), c.t, {12, 1024});
    CHECK(has(c.error(), "query"));
    c.query = TensorView::contiguous(fake_device(0x400000), ScalarType::kFloat32, {12, 8, 128});
    CHECK(has(c.error(), "is not supported for queries, keys and values; supported: fp16, bf16"));
  }
  {  // the caches: swapped, a flash cache, another dtype than the query's
    PrefixCall c;
    std::swap(c.caches.key_cache, c.caches.value_cache);
    CHECK(has(c.error(), "key_cache"));
    PrefixCall f;
    f.query.dtype = f.output.dtype = ScalarType::kFloat16;
    CHECK(has(f.error(), "fp16"));
  }
  {  // vLLM's block size 8, by name
    PrefixCall c;
    c.kv = TensorView::contiguous(fake_device(0x100000), c.t, {2, 10, 8 * 2 * 128});
    c.caches = split_paged_kv_cache(c.kv, 2, 128);
    CHECK(c.error() ==
          "block_size 8 of key_cache bf16[10, 2, 16, 8, 8] strides [2048, 1024, 64, 8, 1] is not "
          "supported (vLLM's default block size 8 included); supported: 16, 32, ..., 256 "
          "(multiples of 16)");
  }
  {  // key and value: the query's tokens, the caches' heads; or empty
    PrefixCall c;
    c.key = TensorView::contiguous(fake_device(0x500000), c.t, {12, 4, 128});
    CHECK(has(c.error(), "key bf16[12, 4, 128]"));
    CHECK(has(c.error(),
              "must be bf16[12, 2, 128] (the query's tokens, the caches' KV heads "
              "and head size) or empty"));
    c.key = TensorView{};
    c.value = TensorView::contiguous(fake_device(0x500000), ScalarType::kFloat16, {12, 2, 128});
    CHECK(has(c.error(), "value fp16[12, 2, 128]"));
  }
  {
    PrefixCall c;
    c.window = -1;
    CHECK(c.error() == "sliding_window -1 is not supported; supported: 0 (none) or >= 1");
  }
  {
    PrefixCall c;
    c.options.scale = -0.5f;
    CHECK(has(c.error(), "scale -0.500000 is not supported; supported: finite > 0"));
  }
  {  // query heads against KV heads; output against query
    PrefixCall c;
    c.query = TensorView::contiguous(fake_device(0x400000), c.t, {12, 7, 128});
    CHECK(has(c.error(), "query has 7 heads, not a positive multiple of the KV cache's 2"));
    PrefixCall o;
    o.output = TensorView::contiguous(fake_device(0x600000), o.t, {12, 8, 64});
    CHECK(has(o.error(), "output"));
  }
  {  // the per-request arrays
    PrefixCall c;
    c.query_start_loc = TensorView::contiguous(fake_device(0x710000), ScalarType::kInt64, {4});
    CHECK(has(c.error(), "query_start_loc must be int32"));
    c.query_start_loc = TensorView::contiguous(fake_device(0x710000), ScalarType::kInt32, {0});
    CHECK(has(c.error(), "needs num_reqs + 1 >= 1 entries"));
    PrefixCall s;
    s.seq_lens = TensorView::contiguous(fake_device(0x720000), ScalarType::kInt32, {2});
    CHECK(has(s.error(), "seq_lens"));
    PrefixCall b;
    b.block_tables = TensorView::contiguous(fake_device(0x700000), ScalarType::kInt32, {2, 4});
    CHECK(has(b.error(), "block_table"));
    PrefixCall m;
    m.max_query_len = -1;
    CHECK(has(m.error(), "max_query_len -1 must be >= 0"));
  }
  {  // non-causal with a window
    PrefixCall c;
    c.options.causal = false;
    c.window = 64;
    CHECK(has(c.error(),
              "non-causal (_nc) attention with a sliding window (swa1) is not "
              "supported"));
  }
  {  // fp8 head sizes in part-chunks never reach a cache (split_kv_cache refuses them)
    const TensorView fp8 = TensorView::contiguous(fake_device(0x100000), ScalarType::kFloat8E4M3,
                                                  {2, 10, 16 * 2 * 120});
    CHECK(has(error_of([&] { split_paged_kv_cache(fp8, 2, 120); }), "head_size 120"));
  }
}

namespace {

// A host model of templates/prefill.cu's legacy V^T path for one spec, on the tile geometry of
// params.h: the load walk (pf_for_each_vt_chunk, pf_load_vt, pf_convert_vt) must put value
// (d, key) of every dimension and tile key exactly once into the swizzled [dim][key] tile, each
// 16-byte cache chunk inside one block; and the plain ldmatrix of pf_tile must hand every lane
// the m16n8k16 B fragment (b[r] element e: dim db2 * 16 + (r / 2) * 8 + lane / 4, key kk * 16 +
// (r % 2) * 8 + 2 * (lane % 4) + e) without bank conflicts. Returns "" or what went wrong.
std::string model_vt_path(int head_size, int block_size, bool fp8) {
  const int pad = ga_prefill_head_pad(head_size), bn = ga_prefill_block_n(head_size);
  const int cpr = bn / 8, rpl = 8 / cpr;
  const auto swz = [&](int d) { return (d & 7) / rpl; };
  const int tok = fp8 ? 16 : 8;
  int seg = block_size, b = bn;  // gcd
  while (b) {
    const int t = seg % b;
    seg = b;
    b = t;
  }
  const int cps = seg / tok, per_seg = head_size * cps, total = per_seg * (bn / seg);
  std::vector<int> tile(static_cast<size_t>(head_size) * bn, -1);  // element -> d * bn + key
  const auto put = [&](int d, int chunk, int key0) {
    for (int j = 0; j < 8; ++j) {
      int& e = tile[d * bn + (chunk ^ swz(d)) * 8 + j];
      if (e != -1) return false;
      e = d * bn + key0 + j;
    }
    return true;
  };
  for (int idx = 0; idx < total; ++idx) {
    const int s = idx / per_seg, rem = idx - s * per_seg, d = rem / cps;
    const int tc = s * cps + rem - d * cps, key = tc * tok;  // tile-relative; tiles start at k*bn
    for (int n0 : {0, bn, 7 * bn})
      if ((n0 + key) / block_size != (n0 + key + tok - 1) / block_size)
        return "a chunk straddles two blocks";
    const bool ok = fp8 ? put(d, 2 * tc, key) && put(d, 2 * tc + 1, key + 8) : put(d, tc, key);
    if (!ok) return "a tile element is written twice";
  }
  for (int e : tile)
    if (e == -1) return "a tile element is never written";
  for (int kk = 0; kk < bn / 16; ++kk)
    for (int db2 = 0; db2 < pad / 16; ++db2) {
      int addr[32];
      for (int lane = 0; lane < 32; ++lane) {
        const int mi = lane >> 3;
        addr[lane] = (db2 * 16 + (mi >> 1) * 8 + (lane & 7)) * bn +
                     ((2 * kk + (mi & 1)) ^ ((lane & 7) / rpl)) * 8;
      }
      for (int m = 0; m < 4; ++m) {
        unsigned slots = 0;  // the 16-byte slots of a 128-byte line the 8 rows hit
        for (int l = 8 * m; l < 8 * m + 8; ++l) slots |= 1u << (addr[l] * 2 % 128 / 16);
        if (slots != 0xff) return "an ldmatrix phase has bank conflicts";
      }
      for (int lane = 0; lane < 32; ++lane)
        for (int r = 0; r < 4; ++r)
          for (int e = 0; e < 2; ++e) {
            const int el = addr[r * 8 + lane / 4] + 2 * (lane % 4) + e;
            const int d = db2 * 16 + (r >> 1) * 8 + lane / 4;
            if (el / bn != d) return "a fragment reads another dimension";
            if (d >= head_size) continue;  // zero padding rows
            if (tile[el] != d * bn + kk * 16 + (r & 1) * 8 + 2 * (lane % 4) + e)
              return "a fragment element holds the wrong key";
          }
    }
  return "";
}

}  // namespace

TEST_CASE("legacy prefill: host model of the V^T tile over every head and block size") {
  int checked = 0;
  for (int h : supported_head_sizes())
    for (int b : supported_block_sizes())
      for (bool fp8 : {false, true}) {
        if (fp8 && h % 16 != 0) continue;
        INFO("head " << h << " block " << b << std::string(fp8 ? " fp8" : " 16-bit"));
        CHECK(model_vt_path(h, b, fp8) == "");
        ++checked;
      }
  CHECK(checked == 29 * 16 + 15 * 16);
}

namespace {

// A host model of templates/prefill_sm90.cu's legacy-layout producer copies for one spec, on the
// tile geometry of params.h: the K walk (pw_legacy_k_setup / _k_rows / _load_k: 16-key groups)
// must put key (key, dim) of every tile key and dimension exactly once into the unswizzled
// chunk-major K tile ([chunk][key][8 dims], wgmma's K-major layout without swizzle), each 32-byte
// cache sector into 32 contiguous tile bytes, and the V^T walk (pw_legacy_load_vt: PW_VT_LPS
// threads a segment) value (key, dim) exactly once into the swizzled [dim][key] tile, each from
// where LegacyLayout says, through a shuffled block table; every 16-byte copy stays inside one
// cache block. Returns "" or what went wrong.
std::string model_sm90_legacy(int head_size, int block_size) {
  const int bn = ga_prefill_sm90_block_n(head_size), chunks = head_size / 8, kh = 2, h = 1;
  const test::LegacyLayout lay{block_size, kh, head_size, 8};
  const int64_t head_stride = int64_t{head_size} * block_size, block_stride = kh * head_stride;
  const int tiles = 8;
  const int nblocks = (tiles * bn + block_size - 1) / block_size;
  std::vector<int> table(nblocks);
  for (int b = 0; b < nblocks; ++b) table[b] = (b * 7 + 3) % nblocks;  // 7 is coprime to them
  // Byte offset of 16-byte chunk c of row r in a swizzled tile of `rows` rows (pw_swizzle).
  const auto swz = [](int r, int c, int rows) {
    return (c >> 3) * rows * 128 + r * 128 + (((c & 7) ^ (r & 7)) << 4);
  };
  const int seg = std::gcd(block_size, bn);  // keys of a V^T segment (PW_VT_SEG)
  const int cps = seg / 8, lps = 128 / (bn / seg), dstep = lps / cps;
  if (lps % cps != 0 || dstep % 8 != 0 || head_size % dstep != 0) return "uneven V^T walk";
  for (int n0 : {0, bn, (tiles - 1) * bn}) {
    // tile element (16-bit unit) -> the cache element it holds
    std::vector<int64_t> kt(static_cast<size_t>(bn) * head_size, -1), vt(kt.size(), -1);
    const auto put = [](std::vector<int64_t>& t, int byte, int64_t src) {
      for (int j = 0; j < 8; ++j) {
        int64_t& e = t[byte / 2 + j];
        if (e != -1) return false;
        e = src + j;
      }
      return true;
    };
    const int gpw = bn / 16 / 4;  // 16-key groups per producer warp (PW_LK_GPW)
    for (int ptid = 0; ptid < 128; ++ptid) {
      const int w = ptid >> 5, half = (ptid >> 4) & 1, t = ptid & 15;
      for (int gg = 0; gg < gpw; ++gg) {
        const int key0 = n0 + (w * gpw + gg) * 16;
        if (key0 / block_size != (key0 + 15) / block_size) return "a K group straddles two blocks";
        const int64_t src = table[key0 / block_size] * block_stride + h * head_stride +
                            int64_t{half} * 8 * block_size + (key0 % block_size + t) * 8;
        for (int i = 0; i < chunks / 2; ++i) {
          // The kernel's offsets: the thread's key in its first group and chunk half, then the
          // group and the chunk pair.
          const int dst = (half * bn + w * gpw * 16 + t) * 16 + gg * 16 * 16 + 2 * i * bn * 16;
          if (!put(kt, dst, src + 2 * i * 8 * block_size))
            return "a K tile element is written twice";
          // A cache sector (keys 2 m and 2 m + 1 of a chunk) into one 32-byte piece of the tile.
          if ((t % 2 == 0) != (dst % 32 == 0) || (src + 2 * i * 8 * block_size) % 16 != t % 2 * 8)
            return "a K sector does not land in 32 contiguous tile bytes";
        }
      }
      const int sg = ptid / lps, lt = ptid % lps, d0 = lt / cps, tc = sg * cps + lt % cps;
      const int key0 = n0 + sg * seg;
      const int64_t base = table[key0 / block_size] * block_stride + h * head_stride +
                           key0 % block_size + int64_t{d0} * block_size + (lt % cps) * 8;
      if ((n0 + tc * 8) / block_size != (n0 + tc * 8 + 7) / block_size)
        return "a V^T chunk straddles two blocks";
      for (int i = 0; i < head_size / dstep; ++i)
        if (!put(vt, swz(d0 + dstep * i, tc, head_size), base + int64_t{dstep} * i * block_size))
          return "a V^T tile element is written twice";
    }
    for (int key = 0; key < bn; ++key)
      for (int d = 0; d < head_size; ++d) {
        const int blk = table[(n0 + key) / block_size], off = (n0 + key) % block_size;
        if (kt[(d / 8 * bn + key) * 8 + d % 8] != lay.key(blk, off, h, d))
          return "a K tile element holds the wrong key element";
        if (vt[swz(d, key / 8, head_size) / 2 + key % 8] != lay.value(blk, off, h, d))
          return "a V^T tile element holds the wrong value element";
      }
  }
  return "";
}

}  // namespace

TEST_CASE("legacy prefill: host model of the sm_90 kernel's K and V^T copies") {
  int checked = 0;
  for (int h : supported_head_sizes())
    for (int b : supported_block_sizes()) {
      if (h % 64 != 0) continue;  // the wgmma kernel's head sizes
      INFO("head " << h << " block " << b);
      CHECK(model_sm90_legacy(h, b) == "");
      ++checked;
    }
  CHECK(checked == 4 * 16);
}
