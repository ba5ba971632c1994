// SPDX-License-Identifier: Apache-2.0
// Every axis of AttentionSpec's one list (GRAPHATTN_SPEC_AXES) reaches everything that must tell
// specs apart. An axis added to the list with no renderer constant (and no template choice)
// renders the same source for both values: the "rendered sources differ" check below fails for
// it, and so does the key check, which hashes that source.
#include <doctest/doctest.h>

#include <set>
#include <string>
#include <utility>
#include <vector>

#include "core/spec_axes.hpp"
#include "graphattn/backend.hpp"
#include "graphattn/error.hpp"
#include "graphattn/jit.hpp"
#include "graphattn/spec.hpp"
#include "tests/test_util.hpp"

using namespace graphattn;

namespace {

struct AxisAccess {
  const char* field;
  int radix;
  int (*get)(const AttentionSpec&);
  void (*set)(AttentionSpec&, int);
};

#define GRAPHATTN_TEST_AXIS(type, field, default_value, form, tag, label, radix, constant, ...) \
  AxisAccess{#field, radix, [](const AttentionSpec& s) { return static_cast<int>(s.field); },   \
             [](AttentionSpec& s, int v) { s.field = static_cast<type>(v); }},
const std::vector<AxisAccess> kAxes = {GRAPHATTN_SPEC_AXES(GRAPHATTN_TEST_AXIS)};
#undef GRAPHATTN_TEST_AXIS

bool valid(const AttentionSpec& s) {
  try {
    s.validate();
    return true;
  } catch (const Error&) {
    return false;
  }
}

// The base spec with `axis` moved to the first other value that validates.
AttentionSpec moved(const AttentionSpec& base, const AxisAccess& axis) {
  for (int v = 0; v < axis.radix; ++v) {
    if (v == axis.get(base)) continue;
    AttentionSpec s = base;
    axis.set(s, v);
    if (valid(s)) return s;
  }
  FAIL("axis " << axis.field << " has no second valid value");
  return base;
}

}  // namespace

// Whether `axis` has a value other than base's that validates.
bool movable(const AttentionSpec& base, const AxisAccess& axis) {
  for (int v = 0; v < axis.radix; ++v) {
    AttentionSpec s = base;
    axis.set(s, v);
    if (v != axis.get(base) && valid(s)) return true;
  }
  return false;
}

TEST_CASE("spec axes: two specs that differ in one axis differ in key, memory tier and source") {
  // A prefill spec (the non-causal and dense-KV axes are prefill axes), a decode spec for the
  // axes of decode kernels only (multi-token), a legacy cache write (interleaved V), an fp8
  // decode spec for the axes that need an fp8 cache (the e4m3 query), and a legacy fp8 decode
  // for the legacy readers' key cache x, and a mixed graphs' _dsp decode for its long splits.
  const AttentionSpec bases[6] = {
      AttentionSpec::parse("prefill_h128_b16_bf16_kvauto_g4_swa0_cap0_nhd_sm90"),
      AttentionSpec::parse("decode_h128_b32_bf16_kvauto_g4_swa0_cap0_nhd_sm90"),
      AttentionSpec::parse("cache_write_h128_b16_bf16_kvauto_g1_swa0_cap0_legacy_sm90"),
      AttentionSpec::parse("decode_h128_b32_bf16_kve4m3_g4_swa0_cap0_nhd_sm90"),
      AttentionSpec::parse("decode_h128_b16_bf16_kve4m3_g4_swa0_cap0_legacy_sm90"),
      AttentionSpec::parse("decode_h128_b16_bf16_kvauto_g4_swa0_cap0_nhd_sm90_dsp")};
  test::TempKernelCache cache;
  const std::shared_ptr<const CompiledKernel> base_kernels[6] = {
      cache.get(bases[0]), cache.get(bases[1]), cache.get(bases[2]),
      cache.get(bases[3]), cache.get(bases[4]), cache.get(bases[5])};
  CHECK(kAxes.size() == 23);  // a new axis: extend this test's reasoning if it needs more
  for (const AxisAccess& axis : kAxes) {
    INFO("axis " << axis.field);
    int b = 0;
    while (b < 5 && !movable(bases[b], axis)) ++b;
    const AttentionSpec& base = bases[b];
    const KernelSource base_src = render_kernel(base);
    const AttentionSpec other = moved(base, axis);
    CHECK(other != base);
    CHECK(other.to_string() != base.to_string());
    CHECK(AttentionSpec::parse(other.to_string()) == other);
    const KernelSource src = render_kernel(other);
    CHECK(src.source != base_src.source);
    CHECK(kernel_key(src, other.arch) != kernel_key(base_src, base.arch));
    CHECK(detail::packed_spec(other) != detail::packed_spec(base));
    CHECK(detail::packed_spec(other) != 0);
    // The memory tier holds a separate kernel for it, compiled once, and serves each its own.
    const uint64_t compiles = cache.stats().compiles;
    const auto kernel = cache.get(other);
    CHECK(kernel.get() != base_kernels[b].get());
    CHECK(kernel->spec == other);
    CHECK(cache.stats().compiles == compiles + 1);
    CHECK(cache.get(other).get() == kernel.get());
    CHECK(cache.get(base).get() == base_kernels[b].get());
  }
}

TEST_CASE("spec axes: the packed key is injective over each axis's whole radix") {
  const AttentionSpec base =
      AttentionSpec::parse("prefill_h64_b32_fp16_kve5m2_g2_swa1_cap1_hnd_sm80_chk");
  for (const AxisAccess& axis : kAxes) {
    INFO("axis " << axis.field);
    std::set<uint64_t> seen;
    for (int v = 0; v < axis.radix; ++v) {
      AttentionSpec s = base;
      axis.set(s, v);
      const uint64_t p = detail::packed_spec(s);
      CHECK(p != 0);
      CHECK(seen.insert(p).second);
    }
  }
}

TEST_CASE("spec axes: each kernel keeps its own axes and holds the canonical value elsewhere") {
  // A layer that asks for everything: each kernel's spec keeps only what that kernel has (the
  // axis list's kernels column) and the canonical value elsewhere; validate() refuses any other.
  KernelFeatures f = AttentionSpec::parse("decode_h128_b32_bf16_kve4m3_g4_swa1_cap1_hnd_sm90");
  f.alibi = f.sinks = f.multi_token = f.block_sparse = f.check_bounds = f.q_fp8 = true;
  const std::pair<KernelKind, const char*> want[] = {
      {KernelKind::kCacheWrite, "cache_write_h128_b32_bf16_kve4m3_g1_swa0_cap0_hnd_sm90_chk"},
      {KernelKind::kDecode,
       "decode_h128_b32_bf16_kve4m3_g4_swa1_cap1_hnd_sm90_alibi_sink_mt_bsp_chk_qe4m3"},
      {KernelKind::kPrefill,
       "prefill_h128_b32_bf16_kve4m3_g4_swa1_cap1_hnd_sm90_alibi_sink_bsp_chk_qe4m3"},
      {KernelKind::kKvScale, "kv_scale_h128_b16_bf16_kvauto_g1_swa0_cap0_nhd_sm90"},
  };
  for (const auto& w : want) {
    // (not structured bindings: clang refuses them in the lambdas of doctest's INFO)
    const KernelKind kind = w.first;
    const char* const text = w.second;
    INFO(text);
    const AttentionSpec s = spec_for(f, kind);
    CHECK(s.to_string() == text);
    CHECK_NOTHROW(s.validate());
    // Every axis of the layer's that this kernel lacks, set back: refused, naming the axis.
    for (const AxisAccess& a : kAxes) {
      if (a.get(s) == a.get(f) || std::string(a.field) == "kind") continue;
      AttentionSpec bad = s;
      a.set(bad, a.get(f));
      INFO(a.field);
      CHECK_THROWS_WITH_AS(bad.validate(), doctest::Contains("kernel "), Error);
      CHECK(bad.for_kernel(kind) == s);
    }
  }
  // Dense K/V: the prefill over no cache keeps none of the paged axes.
  f.dense_kv = f.non_causal = true;
  f.sliding_window = false;
  f.block_sparse = false;
  CHECK(spec_for(f, KernelKind::kPrefill).to_string() ==
        "prefill_h128_b16_bf16_kvauto_g4_swa0_cap1_nhd_sm90_alibi_sink_nc_dense");
  CHECK(spec_for(f, KernelKind::kDecode).to_string() ==
        "decode_h128_b32_bf16_kve4m3_g4_swa0_cap1_hnd_sm90_alibi_sink_mt_chk_qe4m3");
}
