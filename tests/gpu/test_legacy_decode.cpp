// SPDX-License-Identifier: Apache-2.0
// The decode kernel over vLLM's legacy PagedAttention caches on the GPU against the float64
// reference: paged_attention_v1 / v2 (head sizes 32..256 incl. 80, 120 and 256, blocks 8 (16-bit),
// 16 and 32, fp16/bf16/e4m3/e5m2, GQA 1/4/8, ALiBi on and off, seq_lens 0, 1, block boundaries and
// past 8192); direct launches with forced split counts, pipeline depths and clusters, window, soft
// cap and sinks; and one captured paged_attention_v1 replayed with new seq_lens against eager.
//
// The caches are filled by a host scatter into the legacy layout (key [blocks, heads, d / x,
// block, x], value [blocks, heads, d, block]); every slot that must not be read (past seq_len,
// before the window, unused blocks) holds NaN, so a stray read, or a masked token's V not
// zeroed, shows up as NaN in the output.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <string>
#include <vector>

#include "graphattn/graphattn.hpp"
#include "graphattn/runtime.hpp"
#include "runtime/decode.hpp"
#include "runtime/driver.hpp"
#include "runtime/tensor_checks.hpp"
#include "templates/params.h"
#include "testing/host_dtypes.hpp"
#include "testing/legacy_layout.hpp"
#include "testing/reference.hpp"
#include "tests/gpu/legacy_reference.hpp"
#include "tests/test_util.hpp"

using namespace graphattn;
using namespace graphattn::test;

namespace {

struct LegacyCase {
  DType dtype = DType::kBFloat16;
  KvDType kv = KvDType::kAuto;
  int head_size = 128, block_size = 16, num_kv_heads = 2, group = 4;
  bool alibi = false;
  std::vector<int> seq_lens;
  bool v2 = false;  // paged_attention_v2 (else v1)
  // vLLM's block-sparse arguments (vert_stride <= 1: dense)
  int bsp_local = 0, bsp_vert = 0, bsp_block = 64, bsp_step = 0, tp_rank = 0;
  // Direct launches only (detail::launch_decode): window, soft cap, sinks.
  int window = 0;
  float soft_cap = 0;
  bool sinks = false;
  int x = 0;  // the key cache's x in elements (0: 16 bytes of them, split_paged_kv_cache's)
};

std::string describe(const LegacyCase& c) {
  std::string s = std::string(c.v2 ? "v2 " : "v1 ") + to_string(c.dtype) + " kv " +
                  to_string(c.kv) + " head " + std::to_string(c.head_size) + " block " +
                  std::to_string(c.block_size) + " kv heads " + std::to_string(c.num_kv_heads) +
                  " group " + std::to_string(c.group) + (c.alibi ? " alibi" : "") + " window " +
                  std::to_string(c.window) + " cap " + std::to_string(c.soft_cap) +
                  (c.sinks ? " sinks" : "") + " bsp local " + std::to_string(c.bsp_local) +
                  " vert " + std::to_string(c.bsp_vert) + " block " + std::to_string(c.bsp_block) +
                  " step " + std::to_string(c.bsp_step) + " tp_rank " + std::to_string(c.tp_rank) +
                  " x " + std::to_string(c.x) + " seq_lens";
  for (int l : c.seq_lens) s += " " + std::to_string(l);
  return s;
}

// vLLM's name of the cache dtype, its "fp8" alias for e4m3 (graphattn's own names:
// kv_cache_dtype_name).
const char* vllm_kv_dtype_arg(KvDType k) {
  return k == KvDType::kAuto ? "auto" : k == KvDType::kFp8E4M3 ? "fp8" : "fp8_e5m2";
}

// A finite random element: 16-bit from N(0, 1); fp8 codes uniform among finite codes <= 8.
double draw(const LegacyCase& c, std::mt19937_64& rng, uint8_t* dst) {
  if (c.kv == KvDType::kAuto) {
    const uint16_t h = to_storage(c.dtype, std::normal_distribution<double>(0.0, 1.0)(rng));
    std::memcpy(dst, &h, 2);
    return from_storage(c.dtype, h);
  }
  for (;;) {
    const uint8_t code = static_cast<uint8_t>(rng() & 0xff);
    const double v = c.kv == KvDType::kFp8E4M3 ? e4m3_to_double(code) : e5m2_to_double(code);
    if (std::isfinite(v) && std::fabs(v) <= 8) {
      *dst = code;
      return v;
    }
  }
}

constexpr float kKScale = 0.37f, kVScale = 1.9f;  // fp8 caches

// Host and device data of one batch in the legacy caches.
struct LegacyBatch {
  int64_t num_blocks = 0, max_blocks = 1;
  std::vector<int> block_table;
  std::vector<double> q, k_ref, v_ref, slopes, sinks;  // k_ref / v_ref: logical NHD, dequantized
  DeviceBuffer d_kv, d_q, d_out, d_seq, d_bt, d_slopes, d_sinks;
  TensorView kv_view, q_view, out_view, seq_view, bt_view, slopes_view;
  PagedKvCache caches;
};

void build(const LegacyCase& c, std::mt19937_64& rng, LegacyBatch& b, int extra_blocks = 2) {
  const int n = static_cast<int>(c.seq_lens.size());
  const int64_t B = c.block_size, KH = c.num_kv_heads, D = c.head_size, H = KH * c.group;
  const int elem = c.kv == KvDType::kAuto ? 2 : 1;
  const LegacyLayout layout{B, KH, D, c.x != 0 ? c.x : 16 / elem};
  legacy_block_table(c, rng, b, extra_blocks);

  const int64_t half = b.num_blocks * B * KH * D;    // elements of one cache
  std::vector<uint8_t> host(2 * half * elem, 0xff);  // NaN wherever nothing may be read
  b.k_ref.assign(half, 0.0);
  b.v_ref.assign(half, 0.0);
  const double ks = c.kv == KvDType::kAuto ? 1.0 : kKScale;
  const double vs = c.kv == KvDType::kAuto ? 1.0 : kVScale;
  for_each_live_kv(c.seq_lens, c.window, b.block_table, b.max_blocks, B, KH, D,
                   [&](int64_t blk, int64_t off, int64_t h, int64_t d, int64_t ref) {
                     const int64_t kofs = layout.key(blk, off, h, d);
                     const int64_t vofs = half + layout.value(blk, off, h, d);
                     b.k_ref[ref] = ks * draw(c, rng, &host[kofs * elem]);
                     b.v_ref[ref] = vs * draw(c, rng, &host[vofs * elem]);
                   });
  b.d_kv = DeviceBuffer(host.size());
  b.d_kv.upload(host.data(), host.size());
  const ScalarType kst = scalar_type_of(c.kv, c.dtype);
  b.kv_view = TensorView::contiguous(b.d_kv.data(), kst, {2, b.num_blocks, B * KH * D});
  b.caches = split_paged_kv_cache(b.kv_view, c.num_kv_heads, c.head_size);
  if (c.x != 0)  // the same key bytes seen with vLLM's other x (as its tests build them)
    b.caches.key_cache =
        TensorView::contiguous(b.caches.key_cache.data, kst, {b.num_blocks, KH, D / c.x, B, c.x});

  std::vector<uint16_t> q(n * H * D);
  b.q.resize(q.size());
  std::normal_distribution<double> qn(0.0, c.soft_cap > 0 ? 3.0 : 1.0);
  for (size_t i = 0; i < q.size(); ++i) {
    q[i] = to_storage(c.dtype, qn(rng));
    b.q[i] = from_storage(c.dtype, q[i]);
  }
  const ScalarType st = scalar_type_of(c.dtype);
  b.d_q = DeviceBuffer(q.size() * 2);
  b.d_q.upload(q.data(), q.size() * 2);
  b.d_out = DeviceBuffer(q.size() * 2);
  b.q_view = TensorView::contiguous(b.d_q.data(), st, {n, H, D});
  b.out_view = TensorView::contiguous(b.d_out.data(), st, {n, H, D});
  legacy_upload_metadata(c, rng, b);
}

std::vector<double> reference(const LegacyCase& c, LegacyBatch& b, double scale) {
  if (c.bsp_vert <= 1) return legacy_decode_reference(c, b, scale);
  const int num_heads = c.num_kv_heads * c.group;
  const RefBlockSparse bsp{c.bsp_block, c.bsp_local, c.bsp_vert, c.bsp_step, c.tp_rank * num_heads};
  return legacy_decode_reference(c, b, scale, &bsp);
}

// The output against `want`: no NaN, zeros for seq_len 0, relative L2 within the dtype's
// tolerance.
void compare(const LegacyCase& c, const LegacyBatch& b, const std::vector<double>& want) {
  const int64_t row = int64_t{c.num_kv_heads} * c.group * c.head_size;
  std::vector<uint16_t> out(want.size());
  b.d_out.download(out.data(), out.size() * 2);
  size_t nan = 0, nonzero_padded = 0;
  std::vector<double> got(out.size());
  for (size_t i = 0; i < out.size(); ++i) {
    if (is_nan16(c.dtype, out[i])) ++nan;
    if (c.seq_lens[i / row] <= 0 && out[i] != 0) ++nonzero_padded;
    got[i] = from_storage(c.dtype, out[i]);
  }
  CHECK(nan == 0);
  CHECK(nonzero_padded == 0);
  const double err = relative_l2(got, want);
  INFO("relative L2 error " << err);
  CHECK(err <= tolerance(c.dtype));
}

// paged_attention_v1 or v2 on batch b, vLLM's arguments (max_seq_len the batch's longest).
void call_paged_attention(const LegacyCase& c, const LegacyBatch& b, float scale, int max_seq_len,
                          CUstream stream, KernelCache& cache) {
  const float ks = c.kv == KvDType::kAuto ? 1.0f : kKScale;
  const float vs = c.kv == KvDType::kAuto ? 1.0f : kVScale;
  const int n = static_cast<int>(c.seq_lens.size()), H = c.num_kv_heads * c.group;
  if (!c.v2) {
    paged_attention_v1(b.out_view, b.q_view, b.caches.key_cache, b.caches.value_cache,
                       c.num_kv_heads, scale, b.bt_view, b.seq_view, c.block_size, max_seq_len,
                       b.slopes_view, vllm_kv_dtype_arg(c.kv), ks, vs, c.tp_rank, c.bsp_local,
                       c.bsp_vert, c.bsp_block, c.bsp_step, stream, cache);
    return;
  }
  // vLLM's temporaries, NaN-filled: graphattn does not use them.
  const int64_t parts = paged_attention_num_partitions(max_seq_len);
  DeviceBuffer sums(n * H * parts * 4), tmp(n * H * parts * c.head_size * 2);
  sums.fill_bytes(0xff);
  tmp.fill_bytes(0xff);
  const TensorView exp_sums =
      TensorView::contiguous(sums.data(), ScalarType::kFloat32, {n, H, parts});
  const TensorView tmp_out =
      TensorView::contiguous(tmp.data(), scalar_type_of(c.dtype), {n, H, parts, c.head_size});
  paged_attention_v2(b.out_view, exp_sums, exp_sums, tmp_out, b.q_view, b.caches.key_cache,
                     b.caches.value_cache, c.num_kv_heads, scale, b.bt_view, b.seq_view,
                     c.block_size, max_seq_len, b.slopes_view, vllm_kv_dtype_arg(c.kv), ks, vs,
                     c.tp_rank, c.bsp_local, c.bsp_vert, c.bsp_block, c.bsp_step, stream, cache);
  GA_CU_CHECK(detail::driver().cuStreamSynchronize(stream));  // before sums and tmp go
}

int longest(const LegacyCase& c) {
  return std::max(1, *std::max_element(c.seq_lens.begin(), c.seq_lens.end()));
}

void run_api_case(const LegacyCase& c, KernelCache& cache, std::mt19937_64& rng) {
  INFO(describe(c));
  LegacyBatch b;
  build(c, rng, b);
  const double scale = 1.0 / std::sqrt(static_cast<double>(c.head_size));
  const std::vector<double> want = reference(c, b, scale);
  b.d_out.fill_bytes(0xff);
  call_paged_attention(c, b, static_cast<float>(scale), longest(c), nullptr, cache);
  GA_CU_CHECK(detail::driver().cuCtxSynchronize());
  compare(c, b, want);
}

std::vector<LegacyCase> api_cases(std::mt19937_64& rng) {
  std::vector<LegacyCase> cases;
  std::uniform_int_distribution<int> len(2, 3000);
  const int heads[] = {32, 64, 80, 96, 112, 120, 128, 192, 256};
  for (int i = 0; i < 9; ++i) {
    LegacyCase c;
    c.head_size = heads[i];
    c.dtype = i % 2 ? DType::kFloat16 : DType::kBFloat16;
    c.group = i % 3 == 0 ? 1 : i % 3 == 1 ? 4 : 8;
    c.block_size = i % 2 ? 32 : 16;
    c.alibi = i % 2 == 0;
    c.v2 = i % 4 >= 2;
    c.seq_lens = {1, 0, c.block_size, c.block_size + 1, 17, 2 * c.block_size - 1, len(rng)};
    cases.push_back(c);
    if (heads[i] % 16 == 0) {  // fp8 caches: whole 16-element chunks
      c.kv = i % 2 ? KvDType::kFp8E4M3 : KvDType::kFp8E5M2;
      c.alibi = !c.alibi;
      c.v2 = !c.v2;
      c.seq_lens = {len(rng), 1, 33, 0, 512, 513};
      cases.push_back(c);
    }
  }
  // v2's long sequences (past 8192), and batches that fill the device, both versions.
  for (KvDType kv : {KvDType::kAuto, KvDType::kFp8E4M3, KvDType::kFp8E5M2}) {
    LegacyCase c;
    c.kv = kv;
    c.group = 8;
    c.num_kv_heads = 1;
    c.v2 = true;
    c.alibi = kv == KvDType::kFp8E4M3;
    c.seq_lens = {9000, 1, 12345, 8193};
    cases.push_back(c);
  }
  // Block-sparse (vLLM's arguments): sliding over query heads, over KV heads (negative step, a
  // later tensor-parallel rank), fp8 with ALiBi; dense vert_stride 1.
  for (int i = 0; i < 4; ++i) {
    LegacyCase c;
    c.bsp_local = i == 2 ? 1 : 2;
    c.bsp_vert = i == 3 ? 1 : 8;
    c.bsp_block = i == 1 ? 32 : 64;
    c.block_size = i == 1 ? 32 : 16;
    c.group = 4;
    c.num_kv_heads = 2;
    c.bsp_step = i == 1 ? -4 : i == 2 ? 0 : 1;
    c.tp_rank = i == 1 ? 1 : 0;
    c.kv = i == 2 ? KvDType::kFp8E4M3 : KvDType::kAuto;
    c.alibi = i == 2;
    c.v2 = i % 2 == 1;
    c.seq_lens = {1, 64, 65, 700, 3000, 0, len(rng)};
    cases.push_back(c);
  }
  // Block size 8 (vLLM's default; 16-bit caches): a 16-token tile spans two blocks.
  for (int i = 0; i < 4; ++i) {
    LegacyCase c;
    c.block_size = 8;
    c.dtype = i % 2 ? DType::kFloat16 : DType::kBFloat16;
    c.head_size = i == 2 ? 96 : i == 3 ? 256 : 128;
    c.group = i == 0 ? 1 : i == 1 ? 4 : 8;
    c.alibi = i == 1;
    c.v2 = i >= 2;
    c.seq_lens = {1, 0, 7, 8, 9, 15, 16, 17, 24, 25, len(rng), 9000};
    cases.push_back(c);
  }
  for (bool v2 : {false, true}) {
    LegacyCase c;
    c.dtype = DType::kFloat16;
    c.group = 4;
    c.num_kv_heads = 4;
    c.block_size = 32;
    c.v2 = v2;
    for (int i = 0; i < 64; ++i) c.seq_lens.push_back(len(rng));
    cases.push_back(c);
  }
  return cases;
}

}  // namespace

TEST_CASE("gpu legacy decode: paged_attention_v1 and v2 match the float64 reference") {
  GA_REQUIRE_GPU();
  TempKernelCache cache;
  auto rng = make_rng();
  std::vector<LegacyCase> cases = api_cases(rng);
  if (reduced()) cases.resize(3);  // (compute-sanitizer)
  for (const LegacyCase& c : cases) run_api_case(c, cache, rng);
}

// vLLM reads the key cache's x from the tensor; its tests build fp8 caches with x = 8. Kernels
// "_x8" (fp8) and "_x16" (16-bit), and x = 8 for bf16 (16 bytes, the kernel without "_x"),
// against the float64 reference with the output poisoned.
TEST_CASE("gpu legacy decode: key caches with x = 8 and 16 through paged_attention_v1 / v2") {
  GA_REQUIRE_GPU();
  TempKernelCache cache;
  auto rng = make_rng();
  std::uniform_int_distribution<int> len(2, 3000);
  std::vector<LegacyCase> cases;
  for (int i = 0; i < 8; ++i) {
    LegacyCase c;
    c.kv = i < 4 ? (i == 3 ? KvDType::kFp8E5M2 : KvDType::kFp8E4M3) : KvDType::kAuto;
    c.dtype = i == 6 ? DType::kFloat16 : DType::kBFloat16;
    c.x = i < 4 ? 8 : i == 4 ? 8 : 16;
    c.head_size = i == 1 ? 64 : i == 2 ? 80 : i == 5 ? 256 : i == 6 ? 96 : 128;
    c.block_size = i == 6 ? 8 : i % 2 ? 32 : 16;
    c.group = i % 3 == 0 ? 4 : i % 3 == 1 ? 1 : 8;
    c.alibi = i == 2 || i == 5;
    c.v2 = i % 2 == 1;
    c.seq_lens = {1, 0, c.block_size, c.block_size + 1, 17, len(rng), i == 1 ? 9000 : 600};
    cases.push_back(c);
  }
  for (const LegacyCase& c : cases) {
    run_api_case(c, cache, rng);
    // The call ran the kernel its x names ("_x8" / "_x16"; none where x is 16 bytes): already
    // in the memory tier, so getting it compiles nothing.
    const bool named = c.x * (c.kv == KvDType::kAuto ? 2 : 1) != 16;
    const std::string text = "decode_h" + std::to_string(c.head_size) + "_b" +
                             std::to_string(c.block_size) + "_" + to_string(c.dtype) + "_kv" +
                             to_string(c.kv) + "_g" + std::to_string(c.group) +
                             "_swa0_cap0_legacy_sm" + std::to_string(current_device_arch()) +
                             (c.alibi ? "_alibi" : "") + (named ? "_x" + std::to_string(c.x) : "");
    INFO(text);
    const uint64_t compiles = cache.stats().compiles;
    cache.get(AttentionSpec::parse(text));
    CHECK(cache.stats().compiles == compiles);
  }
}

TEST_CASE("gpu legacy decode: forced split counts, depths, clusters, window, soft cap, sinks") {
  GA_REQUIRE_GPU();
  TempKernelCache cache;
  auto rng = make_rng();
  std::vector<LegacyCase> cases;
  {
    LegacyCase c;
    c.seq_lens = {1, 0, 37, 300, 1100, 4096};
    cases.push_back(c);
    c.window = 45;  // the window start inside a tile and inside a V unit
    c.soft_cap = 5;
    c.sinks = true;
    cases.push_back(c);
    c.dtype = DType::kFloat16;
    c.head_size = 80;
    c.group = 20;  // two chunks of query heads per KV head
    c.num_kv_heads = 1;
    cases.push_back(c);
    c = LegacyCase();
    c.block_size = 8;  // two blocks a tile; the window start inside a block
    c.window = 45;
    c.soft_cap = 5;
    c.sinks = true;
    c.seq_lens = {1, 0, 8, 9, 37, 300, 1100, 4096};
    cases.push_back(c);
    c = LegacyCase();
    c.kv = KvDType::kFp8E4M3;
    c.head_size = 64;
    c.window = 100;
    c.alibi = true;
    c.seq_lens = {2000, 101, 99, 1};
    cases.push_back(c);
    c.kv = KvDType::kFp8E5M2;
    c.head_size = 256;
    c.block_size = 32;
    c.window = 0;
    c.sinks = true;
    c.group = 8;
    cases.push_back(c);
  }
  if (reduced()) cases.resize(2);  // (compute-sanitizer)
  const auto& d = detail::driver();
  for (const LegacyCase& c : cases) {
    INFO(describe(c));
    LegacyBatch b;
    build(c, rng, b);
    const double scale = 1.0 / std::sqrt(static_cast<double>(c.head_size));
    const std::vector<double> want = reference(c, b, scale);
    const detail::KvCacheShape kc =
        detail::check_paged_caches(b.caches.key_cache, b.caches.value_cache, c.dtype);
    detail::DecodeLaunch a{{b.q_view, TensorView(), b.out_view, b.seq_view, b.bt_view,
                            static_cast<const float*>(b.d_slopes.data()),
                            static_cast<const float*>(b.d_sinks.data())}};
    a.legacy_kv = kc;
    a.num_decodes = static_cast<int>(c.seq_lens.size());
    a.scale = static_cast<float>(scale);
    a.window = c.window;
    a.soft_cap = c.soft_cap;
    a.k_scale = c.kv == KvDType::kAuto ? 1.0f : kKScale;
    a.v_scale = c.kv == KvDType::kAuto ? 1.0f : kVScale;
    const AttentionSpec spec = detail::attention_spec_for(
        KernelKind::kDecode, b.q_view, b.out_view, kc, c.window, c.soft_cap,
        detail::launch_features(current_device_arch(), false, c.alibi, c.sinks));
    CHECK(spec.layout == KvLayout::kLegacy);
    const detail::LoadedKernel& k = detail::load_kernel(spec, cache);
    const detail::DecodeDevice dev = detail::prepare_decode_kernel(k);
    const int kvb = c.kv == KvDType::kAuto ? 2 : 1;
    const int deep = ga_decode_max_stages(c.head_size, kvb);
    const int shallow = ga_decode_shallow_stages(c.head_size, kvb);
    const int most = (longest(c) + 63) / 64;
    struct G {
      int splits, stages;
      bool cluster;
    };
    std::vector<G> grids = {{1, shallow, false},
                            {1, deep, false},
                            {3, 3, false},
                            {most, deep, false},
                            {most, 2, false}};
    if (dev.max_cluster >= 4) grids.push_back({4, shallow, true});
    const int n = a.num_decodes, H = c.num_kv_heads * c.group;
    DeviceBuffer ws(detail::decode_workspace_bytes(n, H, c.head_size, std::max(most, 4)));
    const size_t num_counters = detail::decode_counter_count(n, c.num_kv_heads, c.group);
    DeviceBuffer counters(num_counters * 4);
    for (const G& g : grids) {
      INFO("max_splits " << g.splits << ", stages " << g.stages
                         << std::string(g.cluster ? ", cluster" : ""));
      a.max_splits = g.splits;
      a.stages = std::min(g.stages, deep);
      a.cluster = g.cluster;
      a.workspace = ws.data();
      a.workspace_size = ws.bytes();
      a.counters = counters.data();
      b.d_out.fill_bytes(0xff);
      detail::launch_decode(k, a, nullptr);
      GA_CU_CHECK(d.cuCtxSynchronize());
      std::vector<unsigned> left(num_counters);
      counters.download(left.data(), left.size() * 4);
      CHECK(std::count(left.begin(), left.end(), 0u) == static_cast<long>(num_counters));
      compare(c, b, want);
    }
    // The fused cache write is refused for the legacy caches.
    detail::DecodeLaunch fused = a;
    fused.new_key = fused.new_value = b.q_view;
    fused.slot_mapping = b.seq_view;
    CHECK_THROWS_WITH_AS(detail::launch_decode(k, fused, nullptr),
                         doctest::Contains("the legacy caches take no fused cache write"), Error);
  }
}

TEST_CASE("gpu legacy decode: a captured paged_attention_v1 replays with new seq_lens") {
  GA_REQUIRE_GPU();
  TempKernelCache cache;
  auto rng = make_rng();
  const auto& d = detail::driver();
  for (bool fp8 : {false, true}) {
    LegacyCase c;
    c.kv = fp8 ? KvDType::kFp8E4M3 : KvDType::kAuto;
    c.alibi = fp8;
    c.seq_lens = {4096, 4096, 4096, 4096};  // filled to 4096: every replay reads within
    INFO(describe(c));
    LegacyBatch b;
    build(c, rng, b);
    const float scale = 1.0f / std::sqrt(128.0f);
    Stream stream;
    // Eager first (loads the kernel, sizes the stream's workspace), then capture.
    call_paged_attention(c, b, scale, 4096, stream, cache);
    stream.synchronize();
    CUgraph graph;
    GA_CU_CHECK(d.cuStreamBeginCapture(stream, CU_STREAM_CAPTURE_MODE_GLOBAL));
    call_paged_attention(c, b, scale, 4096, stream, cache);
    GA_CU_CHECK(d.cuStreamEndCapture(stream, &graph));
    CUgraphExec exec;
    GA_CU_CHECK(d.cuGraphInstantiate(&exec, graph, 0));
    for (const std::vector<int>& lens :
         {std::vector<int>{1, 0, 4096, 2049}, std::vector<int>{300, 17, 16, 0},
          std::vector<int>{4095, 2, 1, 65}}) {
      LegacyCase now = c;
      now.seq_lens = lens;
      INFO(describe(now));
      b.d_seq.upload(lens.data(), lens.size() * 4);
      // Eager on the new lengths, then the replay: both against the reference and each other.
      b.d_out.fill_bytes(0xff);
      call_paged_attention(now, b, scale, 4096, stream, cache);
      stream.synchronize();
      std::vector<uint16_t> eager(4 * 8 * 128), replay(eager.size());
      b.d_out.download(eager.data(), eager.size() * 2);
      const std::vector<double> want = reference(now, b, scale);
      compare(now, b, want);
      b.d_out.fill_bytes(0xff);
      GA_CU_CHECK(d.cuGraphLaunch(exec, stream));
      stream.synchronize();
      b.d_out.download(replay.data(), replay.size() * 2);
      compare(now, b, want);
      std::vector<double> e(eager.size()), r(eager.size());
      for (size_t i = 0; i < eager.size(); ++i) {
        e[i] = from_storage(c.dtype, eager[i]);
        r[i] = from_storage(c.dtype, replay[i]);
      }
      const double diff = relative_l2(r, e);
      INFO("replay vs eager relative L2 " << diff);
      CHECK(diff <= tolerance(c.dtype));
    }
    GA_CU_CHECK(d.cuGraphExecDestroy(exec));
    GA_CU_CHECK(d.cuGraphDestroy(graph));
  }
}

TEST_CASE("gpu legacy decode: multi-token (speculative) requests over the legacy caches") {
  GA_REQUIRE_GPU();
  TempKernelCache cache;
  auto rng = make_rng();
  for (KvDType kv : {KvDType::kAuto, KvDType::kFp8E4M3}) {
    LegacyCase c;
    c.kv = kv;
    c.head_size = kv == KvDType::kAuto ? 128 : 64;
    c.seq_lens = {4, 37, 300, 1500, 1, 0};
    // Query tokens a request (1 + accepted drafts; a padded request keeps its one row), causal
    // among themselves at positions seq_len - q_len .. seq_len - 1.
    const std::vector<int> q_lens = {4, 3, 4, 2, 1, 1};
    constexpr int kMaxQ = 4;
    INFO(describe(c));
    LegacyBatch b;
    build(c, rng, b);
    const int n = static_cast<int>(c.seq_lens.size());
    const int64_t KH = c.num_kv_heads, H = KH * c.group, D = c.head_size;
    std::vector<int> qsl = {0};
    for (int l : q_lens) qsl.push_back(qsl.back() + l);
    const int64_t T = qsl.back();
    // The batch's queries: T rows instead of build()'s one a request.
    std::vector<uint16_t> q(static_cast<size_t>(T * H * D));
    b.q.resize(q.size());
    std::normal_distribution<double> qn(0.0, 1.0);
    for (size_t i = 0; i < q.size(); ++i) {
      q[i] = to_storage(c.dtype, qn(rng));
      b.q[i] = from_storage(c.dtype, q[i]);
    }
    const ScalarType st = scalar_type_of(c.dtype);
    b.d_q = DeviceBuffer(q.size() * 2);
    b.d_q.upload(q.data(), q.size() * 2);
    b.d_out = DeviceBuffer(q.size() * 2);
    b.q_view = TensorView::contiguous(b.d_q.data(), st, {T, H, D});
    b.out_view = TensorView::contiguous(b.d_out.data(), st, {T, H, D});
    DeviceBuffer d_qsl(qsl.size() * 4);
    d_qsl.upload(qsl.data(), qsl.size() * 4);
    const double scale = 1.0 / std::sqrt(static_cast<double>(D));

    RefProblem p = paged_problem(static_cast<int>(H), c.num_kv_heads, c.head_size, c.block_size,
                                 qsl, c.seq_lens, b.block_table, static_cast<int>(b.max_blocks));
    p.q = b.q;
    p.k_cache = b.k_ref;
    p.v_cache = b.v_ref;
    p.scale = scale;
    const std::vector<double> want = reference_attention(p);

    const detail::KvCacheShape kc =
        detail::check_paged_caches(b.caches.key_cache, b.caches.value_cache, c.dtype);
    detail::DecodeLaunch a{{b.q_view, TensorView(), b.out_view, b.seq_view, b.bt_view}};
    a.legacy_kv = kc;
    a.num_decodes = n;
    a.scale = static_cast<float>(scale);
    a.k_scale = kv == KvDType::kAuto ? 1.0f : kKScale;
    a.v_scale = kv == KvDType::kAuto ? 1.0f : kVScale;
    a.multi_token = true;
    a.query_start_loc = TensorView::contiguous(d_qsl.data(), ScalarType::kInt32, {n + 1});
    a.max_query_len = kMaxQ;
    KernelFeatures f = detail::launch_features(current_device_arch(), false, false, false);
    f.multi_token = true;
    const AttentionSpec spec =
        detail::attention_spec_for(KernelKind::kDecode, b.q_view, b.out_view, kc, 0, 0.0f, f);
    CHECK(spec.layout == KvLayout::kLegacy);
    CHECK(spec.multi_token);
    const detail::LoadedKernel& k = detail::load_kernel(spec, cache);
    const int most = (1500 + 63) / 64;
    DeviceBuffer ws(
        detail::decode_workspace_bytes(n * kMaxQ, static_cast<int>(H), c.head_size, most));
    DeviceBuffer counters(detail::decode_counter_count(n, c.num_kv_heads, c.group * kMaxQ) * 4);
    for (int splits : {1, 3, most}) {
      INFO("max_splits " << splits);
      a.max_splits = splits;
      a.workspace = ws.data();
      a.workspace_size = ws.bytes();
      a.counters = counters.data();
      b.d_out.fill_bytes(0xff);  // NaN: every row must be written
      detail::launch_decode(k, a, nullptr);
      GA_CU_CHECK(detail::driver().cuCtxSynchronize());
      std::vector<uint16_t> out(want.size());
      b.d_out.download(out.data(), out.size() * 2);
      std::vector<double> got(out.size());
      size_t nan = 0;
      for (size_t i = 0; i < out.size(); ++i) {
        nan += is_nan16(c.dtype, out[i]);
        got[i] = from_storage(c.dtype, out[i]);
      }
      CHECK(nan == 0);
      const double err = relative_l2(got, want);
      INFO("relative L2 error " << err);
      CHECK(err <= tolerance(c.dtype));
    }
  }
}
