// SPDX-License-Identifier: Apache-2.0
// fp8 KV scales in device memory and calc_kv_scales, on the host: the kv_scale spec kind (parse,
// round trip, its one canonical form), NVRTC builds of it and of the fp8 kernels that read device
// scales, the argument checks of calc_kv_scales (which run before any device use), the layer
// configuration's device scale pointers, and their C ABI (struct_size of older callers).
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <limits>
#include <string>
#include <tuple>
#include <vector>

#include "graphattn/backend.hpp"
#include "graphattn/error.hpp"
#include "graphattn/graphattn.h"
#include "graphattn/jit.hpp"
#include "jit_cache/nvrtc_compiler.hpp"
#include "runtime/tensor_checks.hpp"
#include "testing/configs.hpp"
#include "tests/test_util.hpp"

using namespace graphattn;
using test::error_of;
using test::fake_device;

namespace {

// A compact DLTensor on CUDA device 0 at a fake address.
DLTensor dl_device(uintptr_t at, int ndim, int64_t* shape, DLDataType dtype) {
  DLTensor t{};
  t.data = fake_device(at);
  t.device = {kDLCUDA, 0};
  t.ndim = ndim;
  t.shape = shape;
  t.dtype = dtype;
  return t;
}

TensorView rows(uintptr_t at, ScalarType t, int64_t tokens, int64_t heads, int64_t head) {
  return TensorView::contiguous(fake_device(at), t, {tokens, heads, head});
}

}  // namespace

TEST_CASE("kv scales: the kv_scale spec parses, round-trips and has one canonical form") {
  for (const char* s : {"kv_scale_h128_b16_bf16_kvauto_g1_swa0_cap0_nhd_sm90",
                        "kv_scale_h64_b16_fp16_kvauto_g1_swa0_cap0_nhd_sm80",
                        "kv_scale_h40_b16_bf16_kvauto_g1_swa0_cap0_nhd_sm120"}) {
    INFO(s);
    const AttentionSpec spec = AttentionSpec::parse(s);
    CHECK(spec.kind == KernelKind::kKvScale);
    CHECK(spec.to_string() == s);
  }
  CHECK(std::string(to_string(KernelKind::kKvScale)) == "kv_scale");
  // Every axis the kernel does not depend on is refused away from its default, so one kernel
  // serves every layer of a head size and dtype.
  for (const char* s : {"kv_scale_h128_b32_bf16_kvauto_g1_swa0_cap0_nhd_sm90",
                        "kv_scale_h128_b16_bf16_kve4m3_g1_swa0_cap0_nhd_sm90",
                        "kv_scale_h128_b16_bf16_kvauto_g4_swa0_cap0_nhd_sm90",
                        "kv_scale_h128_b16_bf16_kvauto_g1_swa1_cap0_nhd_sm90",
                        "kv_scale_h128_b16_bf16_kvauto_g1_swa0_cap1_nhd_sm90",
                        "kv_scale_h128_b16_bf16_kvauto_g1_swa0_cap0_hnd_sm90",
                        "kv_scale_h128_b16_bf16_kvauto_g1_swa0_cap0_nhd_sm90_alibi",
                        "kv_scale_h128_b16_bf16_kvauto_g1_swa0_cap0_nhd_sm90_chk"}) {
    INFO(s);
    const std::string msg = error_of([&] { AttentionSpec::parse(s); });
    CHECK(msg.find(std::string("spec ") + s) == 0);
    CHECK(msg.find("depends only on the head size, dtype and arch") != std::string::npos);
  }
  // A layer of any cache, layout, group and options gets the canonical kv_scale spec.
  AttentionLayerConfig c = test::layer_config(32, 8, 128, 4096, 16);
  c.block_size = 64;
  c.kv_dtype = KvDType::kFp8E4M3;
  c.layout = KvLayout::kHND;
  c.window = 512;
  c.soft_cap = 30;
  c.check_bounds = true;
  c.arch = 90;
  CHECK(spec_for(c, KernelKind::kKvScale).to_string() ==
        "kv_scale_h128_b16_bf16_kvauto_g1_swa0_cap0_nhd_sm90");
  // The malformed-string grammar lists the new kind.
  CHECK(error_of([] { AttentionSpec::parse("kv_scal_h128"); }).find("kv_scale") !=
        std::string::npos);
}

TEST_CASE("kv scales: NVRTC builds kv_scale and the fp8 kernels that read device scales") {
  const char* specs[] = {
      "kv_scale_h128_b16_bf16_kvauto_g1_swa0_cap0_nhd_sm90",
      "kv_scale_h80_b16_fp16_kvauto_g1_swa0_cap0_nhd_sm80",
      "kv_scale_h256_b16_fp16_kvauto_g1_swa0_cap0_nhd_sm90",
      "cache_write_h128_b16_bf16_kve4m3_g1_swa0_cap0_nhd_sm90",
      "decode_h128_b16_bf16_kve4m3_g4_swa0_cap0_nhd_sm90",
      "decode_h64_b32_fp16_kve5m2_g8_swa1_cap1_hnd_sm80",
      "prefill_h128_b16_bf16_kve4m3_g4_swa0_cap0_nhd_sm80",
      "prefill_h96_b16_fp16_kve5m2_g2_swa1_cap1_nhd_sm90",
  };
  for (const char* text : specs) {
    INFO(text);
    test::check_cubin_builds(render_kernel(AttentionSpec::parse(text)));
  }
  CHECK(render_kernel(AttentionSpec::parse(specs[0])).entry == "graphattn_kv_scale");
}

TEST_CASE("kv scales: calc_kv_scales names every bad argument before touching a device") {
  const ScalarType bf = ScalarType::kBFloat16;
  const TensorView key = rows(0x10000, bf, 7, 2, 128), value = rows(0x20000, bf, 7, 2, 128);
  float* k_out = static_cast<float*>(fake_device(0x30000));
  float* v_out = static_cast<float*>(fake_device(0x30004));
  const auto call = [&](const TensorView& k, const TensorView& v, float* ko, float* vo, float kd,
                        float vd) {
    return error_of([&] { calc_kv_scales(k, v, ko, vo, kd, vd, nullptr); });
  };
  const float inf = std::numeric_limits<float>::infinity();
  CHECK(call(key, value, k_out, v_out, 0, 100)
            .find("calc_kv_scales: k_divisor 0.000000 is not "
                  "supported; supported: finite > 0") == 0);
  CHECK(call(key, value, k_out, v_out, 200, -1).find("v_divisor -1.000000 is not supported") !=
        std::string::npos);
  CHECK(call(key, value, k_out, v_out, inf, 100).find("k_divisor inf") != std::string::npos);
  CHECK(call(key, value, k_out, v_out, std::nanf(""), 100).find("k_divisor nan") !=
        std::string::npos);
  CHECK(call(key, value, nullptr, v_out, 200, 100) ==
        "calc_kv_scales: k_scale_out is not supported as null; supported: a 4-byte aligned fp32 "
        "device scalar");
  CHECK(call(key, value, k_out, static_cast<float*>(fake_device(0x30002)), 200, 100) ==
        "calc_kv_scales: v_scale_out is not supported at a misaligned address; supported: a "
        "4-byte aligned fp32 device scalar");
  CHECK(call(key, value, k_out, k_out, 200, 100).find("must be two scalars") != std::string::npos);
  // Views: dtype, shapes, alignment.
  CHECK(call(rows(0x10000, ScalarType::kFloat32, 7, 2, 128), value, k_out, v_out, 200, 100)
            .find("dtype fp32 is not supported for queries, keys and values") == 0);
  CHECK(call(key, rows(0x20000, ScalarType::kFloat16, 7, 2, 128), k_out, v_out, 200, 100)
            .find("calc_kv_scales: key dtype bf16 and value dtype fp16") != std::string::npos);
  CHECK(call(key, rows(0x20000, bf, 8, 2, 128), k_out, v_out, 200, 100)
            .find("must have one shape [num_tokens, num_kv_heads, head_size]") !=
        std::string::npos);
  CHECK(call(rows(0x10000, bf, 7, 0, 128), rows(0x20000, bf, 7, 0, 128), k_out, v_out, 200, 100)
            .find("1 or more KV heads") != std::string::npos);
  CHECK(call(rows(0x10002, bf, 7, 2, 128), value, k_out, v_out, 200, 100).find("key ") == 0);
  const TensorView flat = TensorView::contiguous(fake_device(0x10000), bf, {7, 256});
  CHECK(call(flat, value, k_out, v_out, 200, 100).find("key") != std::string::npos);
}

TEST_CASE("kv scales: fp8_max and vLLM's divisors") {
  CHECK(fp8_max(KvDType::kFp8E4M3) == 448.0f);
  CHECK(fp8_max(KvDType::kFp8E5M2) == 57344.0f);
  CHECK(error_of([] { fp8_max(KvDType::kAuto); }) ==
        "fp8_max: KV cache dtype auto is not an fp8 type; supported: e4m3 (448), e5m2 (57344)");
  CHECK(kKScaleDivisor == 200.0f);
  CHECK(kVScaleDivisor == 100.0f);
  CHECK(GRAPHATTN_K_SCALE_DIVISOR == kKScaleDivisor);
  CHECK(kMinKvScale > 0.0f);
  CHECK(std::isnormal(kMinKvScale));
}

TEST_CASE("kv scales: the layer configuration's device scale pointers") {
  AttentionLayerConfig c =
      test::with_kv(test::layer_config(8, 2, 128, 1024, 4), KvDType::kFp8E4M3, 0.5f);
  c.arch = 90;
  CHECK(attention_config_problem(c).empty());
  AttentionLayerConfig d = c;
  d.k_scale_device = static_cast<const float*>(fake_device(0x40000));
  d.v_scale_device = static_cast<const float*>(fake_device(0x40004));
  CHECK(attention_config_problem(d).empty());
  CHECK(d != c);  // fields() holds them: layers with other scalars get other backends
  // Device scales replace the floats; the kernels stay the same.
  CHECK(spec_for(d, KernelKind::kDecode) == spec_for(c, KernelKind::kDecode));
  CHECK(spec_for(d, KernelKind::kPrefill) == spec_for(c, KernelKind::kPrefill));
  AttentionBackend backend(d);
  CHECK(backend.config().k_scale_device == d.k_scale_device);
  CHECK(backend.config().v_scale_device == d.v_scale_device);
  d.v_scale_device = static_cast<const float*>(fake_device(0x40006));
  CHECK(attention_config_problem(d) ==
        "v_scale_device is not supported at a misaligned address; supported: null or a 4-byte "
        "aligned fp32 device scalar");
  // The direct calls (write_kv_cache, prefill_attention, ...) name themselves, same words.
  CHECK_THROWS_WITH_AS(detail::require_device_scales({nullptr, d.v_scale_device}, "write_kv_cache"),
                       "write_kv_cache: v_scale_device is not supported at a misaligned address; "
                       "supported: null or a 4-byte aligned fp32 device scalar",
                       Error);
  CHECK_NOTHROW(detail::require_device_scales({}, "write_kv_cache"));
  CHECK(select_decode_kernel(d) == DecodeKernel::kNone);
  // A 16-bit cache ignores them, as it ignores the float scales.
  AttentionLayerConfig a = test::layer_config(8, 2, 128, 1024, 4);
  a.arch = 90;
  a.k_scale_device = static_cast<const float*>(fake_device(0x40000));
  a.v_scale_device = static_cast<const float*>(fake_device(0x40004));
  AttentionBackend auto_backend(a);
  CHECK(auto_backend.config().k_scale_device == nullptr);
  CHECK(auto_backend.config().v_scale_device == nullptr);
}

TEST_CASE("kv scales: C ABI layer config fields, older struct sizes and calc_kv_scales errors") {
  graphattn_layer_config_t c;
  graphattn_layer_config_init(&c);
  CHECK(c.struct_size == sizeof c);
  CHECK(c.k_scale_device == nullptr);
  CHECK(c.v_scale_device == nullptr);
  // Eight heads on two KV heads of 128, an e4m3 cache, built for sm_90 (no GPU needed).
  std::tie(c.num_heads, c.num_kv_heads, c.head_size, c.max_model_len, c.max_num_seqs, c.arch) =
      std::make_tuple(8, 2, 128, 1024, 4, 90);
  c.kv_dtype = GRAPHATTN_KV_DTYPE_FP8_E4M3;
  c.k_scale_device = static_cast<const float*>(fake_device(0x40000));
  c.v_scale_device = static_cast<const float*>(fake_device(0x40004));
  CHECK(graphattn_layer_config_check(&c) == GRAPHATTN_OK);
  graphattn_backend_t backend = nullptr;
  REQUIRE(graphattn_backend_create(&c, &backend) == GRAPHATTN_OK);
  graphattn_layer_config_t back;
  graphattn_layer_config_init(&back);
  REQUIRE(graphattn_backend_config(backend, &back) == GRAPHATTN_OK);
  CHECK(back.k_scale_device == c.k_scale_device);
  CHECK(back.v_scale_device == c.v_scale_device);
  // A caller built before the fields existed: its struct ends before k_scale_device. Nothing
  // past it is read (a misaligned pointer there would be refused) or written.
  const size_t old_size = offsetof(graphattn_layer_config_t, k_scale_device);
  graphattn_layer_config_t older = c;
  older.struct_size = old_size;
  older.k_scale_device = static_cast<const float*>(fake_device(0x40001));
  CHECK(graphattn_layer_config_check(&older) == GRAPHATTN_OK);
  std::memset(&back, 0xab, sizeof back);
  back.struct_size = old_size;
  REQUIRE(graphattn_backend_config(backend, &back) == GRAPHATTN_OK);
  CHECK(back.num_heads == 8);
  const unsigned char* tail = reinterpret_cast<const unsigned char*>(&back) + old_size;
  CHECK(std::all_of(tail, tail + (sizeof back - old_size),
                    [](unsigned char b) { return b == 0xab; }));
  // Below the first version's size (it ended with check_bounds) is refused.
  older.struct_size = offsetof(graphattn_layer_config_t, check_bounds) + sizeof(int) - 1;
  CHECK(graphattn_layer_config_check(&older) == GRAPHATTN_ERROR_INVALID_ARGUMENT);
  CHECK(std::string(graphattn_last_error()).find("config->struct_size") != std::string::npos);
  graphattn_backend_destroy(backend);
  // The device scalar check of graphattn_calc_kv_scales, and the C++ checks behind it.
  int64_t kv_shape[3] = {7, 2, 128}, scalar_shape[1] = {1};
  DLTensor key = dl_device(0x10000, 3, kv_shape, {kDLBfloat, 16, 1});
  DLTensor value = dl_device(0x20000, 3, kv_shape, {kDLBfloat, 16, 1});
  DLTensor ks = dl_device(0x30000, 1, scalar_shape, {kDLFloat, 32, 1});
  DLTensor vs = dl_device(0x30004, 1, scalar_shape, {kDLFloat, 32, 1});
  CHECK(graphattn_calc_kv_scales(&key, &value, &ks, &vs, 200, 0, nullptr, nullptr) ==
        GRAPHATTN_ERROR);
  CHECK(std::string(graphattn_last_error()).find("v_divisor 0.000000 is not supported") !=
        std::string::npos);
  vs.dtype = {kDLFloat, 16, 1};
  CHECK(graphattn_calc_kv_scales(&key, &value, &ks, &vs, 200, 100, nullptr, nullptr) ==
        GRAPHATTN_ERROR_INVALID_ARGUMENT);
  CHECK(std::string(graphattn_last_error()).find("v_scale") == 0);
  CHECK(std::string(graphattn_last_error()).find("a one-element float32 device tensor") !=
        std::string::npos);
  vs.dtype = {kDLFloat, 32, 1};
  scalar_shape[0] = 2;
  CHECK(graphattn_calc_kv_scales(&key, &value, &ks, &vs, 200, 100, nullptr, nullptr) ==
        GRAPHATTN_ERROR_INVALID_ARGUMENT);
  CHECK(graphattn_calc_kv_scales(nullptr, &value, &ks, &vs, 200, 100, nullptr, nullptr) ==
        GRAPHATTN_ERROR_INVALID_ARGUMENT);
  CHECK(std::string(graphattn_last_error()) == "key is NULL");
}
