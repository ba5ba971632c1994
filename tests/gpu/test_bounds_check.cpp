// SPDX-License-Identifier: Apache-2.0
// Checked mode on the GPU: block ids and slots are device data the host never reads. A checked
// backend's kernels (specs "_chk") report the first one outside the cache, with its request,
// position and value, and skip the access, so the context survives and the next step is clean;
// the fast kernels have no check (a slot past the cache is skipped silently).
#include <doctest/doctest.h>

#include <cstdint>
#include <vector>

#include "graphattn/graphattn.hpp"
#include "runtime/driver.hpp"
#include "tests/gpu/forward_batch.hpp"
#include "tests/test_util.hpp"

using namespace graphattn;
using namespace graphattn::test;

namespace {

using Kind = BoundsViolation::Kind;

// Runs one forward of b (the first `decodes` requests decode) on the legacy stream, after which
// the context must still work.
void step(const AttentionBackend& attn, Batch& b, int decodes, DeviceBuffer& ws) {
  attn.forward(b.query(), b.keys(), b.values(), b.cache_view(), b.output(), b.metadata(decodes),
               ws.data(), ws.bytes(), nullptr);
  GA_CU_CHECK(detail::driver().cuCtxSynchronize());
}

void set_block(Batch& b, int request, int index, int32_t block) {
  b.table.upload(&block, 4, (request * b.W + index) * 4);
}
void set_slot(Batch& b, int token, int64_t slot) { b.slots.upload(&slot, 8, token * 8); }

}  // namespace

TEST_CASE("gpu bounds check: out-of-range block ids and slots are reported, not followed") {
  GA_REQUIRE_GPU();
  TempKernelCache cache;
  constexpr int kMaxLen = 512;
  // bf16 caches take the Hopper wgmma prefill on sm_90, fp8 caches the mma.sync one.
  for (KvDType kv : {KvDType::kAuto, KvDType::kFp8E4M3}) {
    INFO("KV cache " << to_string(kv));
    AttentionLayerConfig cfg = Batch::layer(kv, kMaxLen);
    cfg.check_bounds = true;
    AttentionBackend attn(cfg);
    attn.prepare(cache);
    for (const auto& s : attn.required_specs()) CHECK(s.check_bounds);
    DeviceBuffer ws(attn.workspace_bytes());
    CHECK_FALSE(attn.take_bounds_violation());
    {
      INFO("decode kernel: a block id past the cache");
      Batch b(2, 1, 40, kv);  // 3 blocks per request: keys 16..31 are in block index 1
      set_block(b, 1, 1, static_cast<int32_t>(b.NB + 7));
      step(attn, b, 2, ws);
      const BoundsViolation v = attn.take_bounds_violation();
      CHECK(v.kind == Kind::kBlockId);
      CHECK(v.request == 1);
      CHECK(v.position == 16);  // the first key of the decode tile that block holds
      CHECK(v.value == b.NB + 7);
      CHECK(v.describe().find("block id " + std::to_string(b.NB + 7) + " of request 1") == 0);
      CHECK_FALSE(attn.take_bounds_violation());          // taken, so cleared
      set_block(b, 1, 1, static_cast<int32_t>(b.W + 1));  // request 1's own block again
      step(attn, b, 2, ws);
      CHECK_FALSE(attn.take_bounds_violation());
    }
    {
      INFO("prefill kernel: a negative block id");
      Batch b(2, 16, 100, kv);  // 7 blocks per request; keys 32..47 are in block index 2
      set_block(b, 0, 2, -3);
      step(attn, b, 0, ws);
      const BoundsViolation v = attn.take_bounds_violation();
      CHECK(v.kind == Kind::kBlockId);
      CHECK(v.request == 0);
      CHECK(v.position >= 32);
      CHECK(v.position < 48);
      CHECK(v.value == -3);
    }
    {
      INFO("cache write kernel: a slot past the cache");
      Batch b(2, 16, 100, kv);
      const int64_t bad = b.NB * Batch::B + 100;
      set_slot(b, 21, bad);
      step(attn, b, 0, ws);
      const BoundsViolation v = attn.take_bounds_violation();
      CHECK(v.kind == Kind::kSlot);
      CHECK(v.request == -1);
      CHECK(v.position == 21);
      CHECK(v.value == bad);
    }
    {
      // A decode-only step writes its new rows inside the decode kernel (16-bit and fp8 caches).
      INFO("decode kernel's fused write: a slot just past the cache");
      Batch b(3, 1, 40, kv);
      set_slot(b, 2, b.NB * Batch::B);
      step(attn, b, 3, ws);
      const BoundsViolation v = attn.take_bounds_violation();
      CHECK(v.kind == Kind::kSlot);
      CHECK(v.request == 2);
      CHECK(v.position == 2);
      CHECK(v.value == b.NB * Batch::B);
    }
  }
}

TEST_CASE("gpu bounds check: the fast kernels skip a slot past the cache without a report") {
  GA_REQUIRE_GPU();
  TempKernelCache cache;
  AttentionBackend attn(Batch::layer(KvDType::kAuto, 512));
  attn.prepare(cache);
  for (const auto& s : attn.required_specs()) CHECK_FALSE(s.check_bounds);
  DeviceBuffer ws(attn.workspace_bytes());
  Batch b(2, 16, 100, KvDType::kAuto);
  for (int t = 0; t < b.T; ++t) set_slot(b, t, b.NB * Batch::B + t);  // every slot past the end
  step(attn, b, 0, ws);
  CHECK(b.cache_unchanged());
  CHECK_THROWS_WITH_AS(attn.take_bounds_violation(), doctest::Contains("not in checked mode"),
                       Error);
}
