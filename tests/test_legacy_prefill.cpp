// The prefill kernel over vLLM's legacy PagedAttention caches (spec layout "legacy") and
// forward_prefix on the host: spec strings, the kernel selection, NVRTC builds across dtypes,
// head sizes, block sizes and score modifiers, and every argument check of forward_prefix (all
// before any device use).
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "graphattn/graphattn.hpp"
#include "jit_cache/nvrtc_compiler.hpp"
#include "jit_cache/prefill_kernels.hpp"
#include "runtime/prefill.hpp"
#include "templates/params.h"
#include "tests/test_util.hpp"

using namespace graphattn;
using test::error_of;
using test::fake_device;

TEST_CASE("legacy prefill: spec strings, and the mma.sync kernel serves them on every arch") {
  const char* text = "prefill_h128_b16_bf16_kvauto_g4_swa0_cap0_legacy_sm90";
  const AttentionSpec s = AttentionSpec::parse(text);
  CHECK(s.layout == KvLayout::kLegacy);
  CHECK(s.kind == KernelKind::kPrefill);
  CHECK(s.to_string() == text);
  // On sm_90 a flash-layout spec of this shape takes the wgmma kernel; legacy stays on mma.sync.
  AttentionSpec flash = s;
  flash.layout = KvLayout::kNHD;
  CHECK(detail::select_prefill_kernel(flash) == detail::PrefillKernel::kWgmma);
  CHECK(detail::select_prefill_kernel(s) == detail::PrefillKernel::kMmaSync);
  const detail::PrefillConfig cfg = detail::prefill_config(s);
  CHECK(cfg.block_m == ga_prefill_block_m(128));
  CHECK(cfg.shared_bytes == ga_prefill_smem_bytes(128, false));
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
                        "prefill_h96_b64_bf16_kve5m2_g1_swa0_cap1_legacy_sm90_chk"})
    specs.push_back(s);
  for (const std::string& text : specs) {
    INFO(text);
    const KernelSource src = render_kernel(AttentionSpec::parse(text));
    CHECK(src.source.find("constexpr int KV_LAYOUT = 2;") != std::string::npos);
    test::check_cubin_builds(src);
  }
}
