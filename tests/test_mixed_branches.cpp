// SPDX-License-Identifier: Apache-2.0
// GRAPHATTN_MIXED_BRANCHES and AttentionBackend::set_mixed_branches without a GPU: the mode a
// backend takes at construction, per backend and per copy, and the error for a bad value; the
// decode grid of a batch split on the device (GRAPHATTN_MIXED_DECODE_DIVISOR; 0: the splits
// chosen by the kernel). (The GPU tests check the launches: tests/gpu/test_decode_graphs.cpp,
// test_concurrency.cpp.)
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

#include "graphattn/backend.hpp"
#include "graphattn/error.hpp"
#include "runtime/mixed_grid.hpp"
#include "templates/params.h"
#include "testing/configs.hpp"
#include "tests/test_util.hpp"

using namespace graphattn;

TEST_CASE(
    "mixed branches: GRAPHATTN_MIXED_BRANCHES sets a backend's mode, set_mixed_branches one's") {
  AttentionLayerConfig c = test::layer_config(8, 2, 128, 1024, 4);
  c.arch = 90;
  const char* old = std::getenv("GRAPHATTN_MIXED_BRANCHES");
  const std::string saved = old ? old : "";
  ::unsetenv("GRAPHATTN_MIXED_BRANCHES");
  CHECK(AttentionBackend(c).mixed_branches() == MixedBranches::kPrefillFirst);
  CHECK(resolve_mixed_branches(MixedBranches::kDefault) == MixedBranches::kPrefillFirst);
  for (MixedBranches m : {MixedBranches::kSerial, MixedBranches::kSerialPrefillFirst,
                          MixedBranches::kDecodeFirst, MixedBranches::kPrefillFirst,
                          MixedBranches::kDecodeFirstHigh, MixedBranches::kPrefillFirstHigh}) {
    const std::string name = mixed_branches_name(m);
    INFO("GRAPHATTN_MIXED_BRANCHES=" << name);
    ::setenv("GRAPHATTN_MIXED_BRANCHES", name.c_str(), 1);
    CHECK(AttentionBackend(c).mixed_branches() == m);
    CHECK(resolve_mixed_branches(MixedBranches::kDecodeFirst) == MixedBranches::kDecodeFirst);
  }
  CHECK(std::string(mixed_branches_name(MixedBranches::kSerial)) == "off");
  ::setenv("GRAPHATTN_MIXED_BRANCHES", "off", 1);
  AttentionBackend a(c);
  CHECK(a.mixed_branches() == MixedBranches::kSerial);
  AttentionBackend copy = a;
  a.set_mixed_branches(MixedBranches::kDecodeFirst);  // copies made before keep their mode
  CHECK(a.mixed_branches() == MixedBranches::kDecodeFirst);
  CHECK(copy.mixed_branches() == MixedBranches::kSerial);
  a.set_mixed_branches(MixedBranches::kDefault);  // resolved again: the variable
  CHECK(a.mixed_branches() == MixedBranches::kSerial);
  ::setenv("GRAPHATTN_MIXED_BRANCHES", "prefill_first", 1);
  CHECK_THROWS_WITH_AS(
      AttentionBackend{c},
      doctest::Contains("GRAPHATTN_MIXED_BRANCHES=\"prefill_first\" is not a mode; "
                        "allowed: off, serial-prefill-first, decode-first"),
      Error);
  if (old)
    ::setenv("GRAPHATTN_MIXED_BRANCHES", saved.c_str(), 1);
  else
    ::unsetenv("GRAPHATTN_MIXED_BRANCHES");
}

TEST_CASE("mixed branches: parse_mixed_branches reads the variable's names") {
  for (MixedBranches m : {MixedBranches::kSerial, MixedBranches::kSerialPrefillFirst,
                          MixedBranches::kDecodeFirst, MixedBranches::kPrefillFirst,
                          MixedBranches::kDecodeFirstHigh, MixedBranches::kPrefillFirstHigh})
    CHECK(parse_mixed_branches(mixed_branches_name(m)) == m);
  for (const char* bad : {"default", "", "OFF", "prefill_first"}) {
    const std::string want = "mixed branches mode \"" + std::string(bad) +
                             "\" is not a mode; allowed: off, serial-prefill-first, decode-first, "
                             "prefill-first, decode-first-high, prefill-first-high";
    CHECK_THROWS_WITH_AS(parse_mixed_branches(bad), doctest::Contains(want.c_str()), Error);
  }
}

namespace {
// An H100 for the split policy: 132 multiprocessors, head-128 bf16 decode blocks 3 / 2 / 1 a
// multiprocessor at 2 / 3 / 4 stages (64 / 96 / 128 KiB), no clusters.
detail::DecodeDevice h100() {
  detail::DecodeDevice d;
  d.num_sms = 132;
  d.blocks_per_sm[2] = 3;
  d.blocks_per_sm[3] = 2;
  d.blocks_per_sm[4] = 1;
  return d;
}
// llama-3-8b's attention (32 / 8 heads, head 128, bf16) over `slots` slots at max_model_len len.
detail::DecodeGrid llama_mixed(int slots, int divisor, int len) {
  return detail::mixed_decode_grid(slots, divisor, 8, 4, len, 0, 128, KvDType::kAuto, h100());
}
detail::DecodeGrid llama_host(int decodes, int len) {
  return detail::decode_grid(decodes, 8, 4, len, 0, 128, KvDType::kAuto, h100());
}
}  // namespace

TEST_CASE("mixed decode grid: a graph of few slots splits like a batch of slots / divisor") {
  // 4 decodes at 2048 + 16 prefill tokens: a 20-slot graph. Sized for 20 decodes the policy
  // gives one split (160 blocks fill the device); for ceil(20 / 4) = 5, three.
  CHECK(llama_host(20, 2048).max_splits == 1);
  CHECK(llama_host(4, 2048).max_splits == 4);  // the host split of the same batch
  CHECK(llama_mixed(20, 1, 2048).max_splits == 1);
  CHECK(llama_mixed(20, 4, 2048).max_splits == llama_host(5, 2048).max_splits);
  CHECK(llama_mixed(20, 4, 2048).max_splits == 3);
  CHECK(llama_mixed(20, 8, 2048).max_splits == llama_host(3, 2048).max_splits);
  // The policy's stages come with the grid it takes.
  CHECK(llama_mixed(20, 4, 2048).stages == llama_host(5, 2048).stages);
  CHECK(llama_mixed(20, 1, 2048).stages == llama_host(20, 2048).stages);
  // 56 decodes + a 512-token chunk in a 64-slot graph: 16 decodes fill the device alone too,
  // so the grid stays the every-slot one.
  for (int divisor : {1, 2, 4}) {
    INFO("divisor " << divisor);
    const detail::DecodeGrid g = llama_mixed(64, divisor, 2560), all = llama_host(64, 2560);
    CHECK(g.max_splits == all.max_splits);
    CHECK(g.stages == all.stages);
  }
  // Never fewer splits than the every-slot grid, for any slot count and divisor.
  for (int slots = 1; slots <= 256; ++slots)
    for (int divisor : {1, 2, 4, 8, 64})
      for (int len : {256, 2048, 8192}) {
        INFO("slots " << slots << " divisor " << divisor << " len " << len);
        const int g = llama_mixed(slots, divisor, len).max_splits;
        CHECK(g >= llama_host(slots, len).max_splits);
        CHECK(g == std::max(llama_host(slots, len).max_splits,
                            llama_host((slots + divisor - 1) / divisor, len).max_splits));
      }
}

TEST_CASE("mixed decode grid: divisor 0 lets the kernel split like the host for d decodes") {
  for (int slots : {1, 17, 20, 40, 64, 256})
    for (int len : {256, 2048, 8192}) {
      INFO("slots " << slots << " len " << len);
      const detail::DecodeGrid g = llama_mixed(slots, 0, len);
      CHECK(g.device_sms == 132);
      CHECK(g.grid_y == 8);
      CHECK(!g.cluster);
      CHECK(g.max_splits == llama_host(1, len).max_splits);  // one decode: the most splits
      CHECK(g.stages == llama_mixed(slots, kMixedDecodeDivisor, len).stages);
      int most_blocks = slots, split_requests = 0;
      for (int d = 1; d <= slots; ++d) {
        const int s = ga_device_split_splits(d, g.grid_y, g.device_sms, g.max_splits);
        // d decodes that do not fill the device: the host split's splits for d decodes
        if (d * 8 < 132) CHECK(s == llama_host(d, len).max_splits);
        if (d * 8 >= 132) CHECK(s == 1);
        most_blocks = std::max(most_blocks, d * s + slots - d);
        if (s > 1) split_requests = d;
      }
      CHECK(detail::device_split_blocks(slots, g.grid_y, g.max_splits, g.device_sms) ==
            most_blocks);
      CHECK(g.split_requests == split_requests);
    }
  // The mixes of graphattn-bench --mixed-shapes: 1 decode at 4096 in a 17-slot graph takes the
  // host split's 16 splits, 4 at 8192 in 64 slots 4, 56 at 2048 in 64 slots 1.
  const detail::DecodeGrid g17 = llama_mixed(17, 0, 8192), g64 = llama_mixed(64, 0, 8192);
  CHECK(ga_device_split_splits(1, 8, 132, g17.max_splits) == 16);
  CHECK(ga_device_split_splits(4, 8, 132, g64.max_splits) == 4);
  CHECK(ga_device_split_splits(56, 8, 132, g64.max_splits) == 1);
  CHECK(detail::device_split_blocks(17, 8, g17.max_splits, 132) == 32);  // d = 1: 16 + 16
  // Past 65535 blocks along z: the divisor-4 grid, the splits chosen on the host.
  CHECK(llama_mixed(65535, 0, 8192).device_sms == 0);
  CHECK(llama_mixed(65535, 0, 8192).max_splits == llama_mixed(65535, 4, 8192).max_splits);
  // The depth of graphattn-bench's mixed graphs (as the divisor-4 graphs printed on an H100):
  // 1 x 4096 + 16 (17 slots) 4 stages, 4 x 2048 + 16 (20) and 8 x 1024 + 32 (40) 2, 64 slots 3.
  CHECK(llama_mixed(17, 0, 4096).stages == 4);
  CHECK(llama_mixed(20, 0, 2048).stages == 2);
  CHECK(llama_mixed(40, 0, 1024).stages == 2);
  CHECK(llama_mixed(64, 0, 8192).stages == 3);
  // The prefill beside the decode keeps the multiprocessors of its row tiles (block_m 128, GQA 4,
  // 8 KV heads): 16 tokens one tile a KV head, so 4 decodes at 2048 take 3 splits (the host
  // split's 4 would leave it none), 32 tokens leave 8 decodes one split, 64 tokens leave 4 at
  // 8192 three; a prefill of 512 tokens or more keeps every multiprocessor (one split).
  CHECK(ga_device_split_room(132, 16, 4, 128, 8) == 124);
  CHECK(ga_device_split_splits(4, 8, ga_device_split_room(132, 16, 4, 128, 8), 16) == 3);
  CHECK(ga_device_split_splits(8, 8, ga_device_split_room(132, 32, 4, 128, 8), 16) == 1);
  CHECK(ga_device_split_splits(4, 8, ga_device_split_room(132, 64, 4, 128, 8), 16) == 3);
  CHECK(ga_device_split_splits(1, 8, ga_device_split_room(132, 16, 4, 128, 8), 16) == 15);
  CHECK(ga_device_split_room(132, 512, 4, 128, 8) == 4);
  CHECK(ga_device_split_room(132, 1024, 4, 128, 8) == 0);
  CHECK(ga_device_split_splits(1, 8, 0, 16) == 1);
  CHECK(ga_device_split_room(132, 0, 4, 128, 8) == 132);  // no prefill
  CHECK(ga_device_split_room(132, 600, 4, 0, 8) == 132);  // no room kept
}

TEST_CASE("mixed decode grid: GRAPHATTN_MIXED_DSP_SM_BLOCKS's count plans N blocks an SM") {
  // The measurement switch (runtime/decode.cpp prepare_decode_kernel reads it into
  // DecodeDevice::dsp_sm_blocks): the kernel's count and the grid take sms x N, so the grid
  // still covers the most blocks any count of decodes takes; 0 and 1 are the default.
  for (int n : {0, 1, 2, 4})
    for (int slots : {17, 20, 64})
      for (int len : {2048, 8192}) {
        INFO("blocks " << n << " slots " << slots << " len " << len);
        detail::DecodeDevice dev = h100();
        dev.dsp_sm_blocks = n;
        const detail::DecodeGrid g =
            detail::mixed_decode_grid(slots, 0, 8, 4, len, 0, 128, KvDType::kAuto, dev);
        const int sms = 132 * std::max(n, 1);
        CHECK(g.device_sms == sms);
        CHECK(g.stages == llama_mixed(slots, 0, len).stages);  // the depth is the default's
        CHECK(g.max_splits == llama_mixed(slots, 0, len).max_splits);
        const int z = detail::device_split_blocks(slots, g.grid_y, g.max_splits, g.device_sms);
        for (int d = 1; d <= slots; ++d)
          CHECK(d * ga_device_split_splits(d, g.grid_y, g.device_sms, g.max_splits) + slots - d <=
                z);
      }
  // 4 decodes at 8192 beside 64 prefill tokens in 64 slots: 3 splits by default, 7 at 2 blocks.
  detail::DecodeDevice two = h100();
  two.dsp_sm_blocks = 2;
  const detail::DecodeGrid g2 =
      detail::mixed_decode_grid(64, 0, 8, 4, 8192, 0, 128, KvDType::kAuto, two);
  CHECK(ga_device_split_splits(4, 8, ga_device_split_room(132, 64, 4, 128, 8), 16) == 3);
  CHECK(ga_device_split_splits(4, 8, ga_device_split_room(g2.device_sms, 64, 4, 128, 8),
                               g2.max_splits) == 7);
}

TEST_CASE("mixed decode grid: GRAPHATTN_MIXED_DSP_LONG_TILES sizes the grid for two blocks an SM") {
  // DecodeDevice::dsp_long_tiles: where the depth is deeper than the shallow one (2 stages here)
  // and lets two blocks share a multiprocessor (3 stages), the grid and device_sms take two
  // blocks a multiprocessor and long_split_tokens says how long the shortest decode's splits
  // must be for the _dsp_long kernel to keep that count (else half of it); the other graphs keep
  // the plain _dsp grid (and kernel).
  for (int slots : {17, 20, 64, 68})
    for (int len : {2048, 8192})
      for (int window : {0, 256}) {
        INFO("slots " << slots << " len " << len << " window " << window);
        detail::DecodeDevice dev = h100();
        dev.dsp_long_tiles = 8;
        const detail::DecodeGrid g =
            detail::mixed_decode_grid(slots, 0, 8, 4, len, window, 128, KvDType::kAuto, dev);
        const detail::DecodeGrid one =
            detail::mixed_decode_grid(slots, 0, 8, 4, len, window, 128, KvDType::kAuto, h100());
        CHECK(g.stages == one.stages);
        CHECK(g.max_splits == one.max_splits);
        const bool two = window == 0 && g.stages == 3;
        CHECK(g.device_sms == (two ? 264 : 132));
        CHECK(g.long_split_tokens == (two ? 8 * 16 * 4 : 0));
        // the grid and the partials cover the one-block count too
        CHECK(detail::device_split_blocks(slots, g.grid_y, g.max_splits, g.device_sms) >=
              detail::device_split_blocks(slots, one.grid_y, one.max_splits, one.device_sms));
        CHECK(g.split_requests >= one.split_requests);
        if (!two) CHECK(g.split_requests == one.split_requests);
      }
  // graphattn-bench's mixes: 4 x 8192 + 64 (64 slots, 3 stages) takes the long grid; 1 x 4096 +
  // 16 (17 slots, 4 stages), 4 x 2048 + 16 (20, 2) and 8 x 1024 + 32 (40, 2) keep the plain one.
  {
    detail::DecodeDevice dev = h100();
    dev.dsp_long_tiles = 8;
    const auto grid = [&](int slots, int len) {
      return detail::mixed_decode_grid(slots, 0, 8, 4, len, 0, 128, KvDType::kAuto, dev);
    };
    // (tests/gpu/test_decode_graphs.cpp's _dsp_long case: 8 / 2 heads at 8192, 96 slots long,
    // 24 slots at the shallow depth)
    for (int slots : {96, 24}) {
      const detail::DecodeGrid g =
          detail::mixed_decode_grid(slots, 0, 2, 4, 8192, 0, 128, KvDType::kAuto, dev);
      CHECK(g.stages == (slots == 96 ? 3 : 2));
      CHECK(g.long_split_tokens == (slots == 96 ? 512 : 0));
    }
    CHECK(grid(64, 8192).long_split_tokens == 512);
    CHECK(grid(64, 8192).device_sms == 264);
    for (const auto& sl : {std::pair{17, 4096}, std::pair{20, 2048}, std::pair{40, 1024}}) {
      // (named copies: a lambda, as INFO's, may not capture structured bindings in C++17)
      const int slots = sl.first, len = sl.second;
      INFO("slots " << slots << " len " << len);
      CHECK(grid(slots, len).long_split_tokens == 0);
      CHECK(grid(slots, len).device_sms == 132);
      CHECK(grid(slots, len).split_requests == llama_mixed(slots, 0, len).split_requests);
    }
  }
  // fp8 KV: the window is off in those kernels, so is the two-block count
  detail::DecodeDevice dev = h100();
  dev.dsp_long_tiles = 8;
  CHECK(detail::mixed_decode_grid(64, 0, 8, 4, 8192, 0, 128, KvDType::kFp8E4M3, dev)
            .long_split_tokens == 0);
  // with GRAPHATTN_MIXED_DSP_SM_BLOCKS set, that switch decides
  dev.dsp_sm_blocks = 3;
  const detail::DecodeGrid g3 =
      detail::mixed_decode_grid(64, 0, 8, 4, 8192, 0, 128, KvDType::kAuto, dev);
  CHECK(g3.long_split_tokens == 0);
  CHECK(g3.device_sms == 396);
}

// Session 13 computes both with unsigned 32-bit divisions (the _dsp kernel's blocks wait for
// them); they must equal the signed 64-bit formulas of session 12, which the host's grid sizing
// and the bench's printed splits also use.
TEST_CASE("mixed decode grid: the device-split helpers equal their 64-bit formulas") {
  auto splits64 = [](int d, int grid_y, int sms, int max_splits) {
    const long long s = d < 1 || grid_y < 1 ? 1 : static_cast<long long>(sms) / grid_y / d;
    return static_cast<int>(s < 1 ? 1 : s > max_splits ? max_splits : s);
  };
  auto room64 = [](int sms, int tokens, int group, int block_m, int kv_heads) {
    const long long blocks =
        block_m > 0 && tokens > 0
            ? (static_cast<long long>(tokens) * group + block_m - 1) / block_m * kv_heads
            : 0;
    return blocks >= sms ? 0 : sms - static_cast<int>(blocks);
  };
  int checked = 0;
  for (int sms : {0, 1, 78, 108, 132, 144, 65535})
    for (int y : {1, 2, 3, 8, 16, 40, 65535})
      for (int d : {0, 1, 2, 3, 7, 64, 1000, 65535})
        for (int most : {1, 4, 16, 32}) {
          INFO(sms << " " << y << " " << d << " " << most);
          CHECK(ga_device_split_splits(d, y, sms, most) == splits64(d, y, sms, most));
          ++checked;
        }
  for (int sms : {1, 132, 144})
    for (int tokens : {-1, 0, 1, 16, 63, 64, 65, 511, 512, 4096, 65536, 1 << 24, 1 << 30})
      for (int group : {1, 4, 7, 16})
        for (int block_m : {0, 64, 128, 192})
          for (int kv : {1, 8, 40}) {
            INFO(sms << " " << tokens << " " << group << " " << block_m << " " << kv);
            CHECK(ga_device_split_room(sms, tokens, group, block_m, kv) ==
                  room64(sms, tokens, group, block_m, kv));
            ++checked;
          }
  CHECK(checked > 3000);
}

TEST_CASE("mixed decode grid: divisor 0 gives one-token layers a _dsp decode kernel") {
  AttentionLayerConfig c = test::layer_config(8, 2, 128, 1024, 4);
  c.arch = 90;
  test::ScopedEnv env("GRAPHATTN_MIXED_DECODE_DIVISOR", "4");
  CHECK(AttentionBackend(c).required_specs().size() == 3);  // the three of divisors >= 1
  env.set(nullptr);                                         // the default: divisor 0
  CHECK(AttentionBackend(c).required_specs().size() == 5);  // with _dsp_long (the default 8)
  env.set("0");
  {
    test::ScopedEnv long_off("GRAPHATTN_MIXED_DSP_LONG_TILES", "0");  // no _dsp_long kernel
    CHECK(AttentionBackend(c).required_specs().size() == 4);
  }
  const std::vector<AttentionSpec> specs = AttentionBackend(c).required_specs();
  REQUIRE(specs.size() == 5);
  AttentionSpec long_plain = specs[4];
  CHECK(long_plain.dsp_long_splits);
  CHECK(long_plain.to_string() == specs[3].to_string() + "_long");
  long_plain.dsp_long_splits = false;
  CHECK(long_plain == specs[3]);
  AttentionSpec plain = specs[3];
  CHECK(plain.device_splits);
  CHECK(plain.to_string() == specs[1].to_string() + "_dsp");
  plain.device_splits = false;
  CHECK(plain == specs[1]);  // the decode's spec otherwise
  CHECK(AttentionSpec::parse(specs[3].to_string()) == specs[3]);
  c.decode_query_len = 4;  // multi-token layers keep the divisor-4 sizing and main's kernels
  CHECK(AttentionBackend(c).required_specs().size() == 3);
  AttentionSpec mt = specs[3];
  mt.multi_token = true;
  CHECK_THROWS_WITH_AS(mt.validate(), doctest::Contains("device-chosen splits (_dsp)"), Error);
  AttentionSpec prefill = specs[2];
  prefill.device_splits = true;
  CHECK_THROWS_AS(prefill.validate(), Error);  // a decode axis
}

TEST_CASE("mixed decode grid: GRAPHATTN_MIXED_DECODE_DIVISOR, read when a backend is made") {
  AttentionLayerConfig c = test::layer_config(8, 2, 128, 1024, 4);
  c.arch = 90;
  test::ScopedEnv env("GRAPHATTN_MIXED_DECODE_DIVISOR", nullptr);
  CHECK(mixed_decode_divisor_from_env() == kMixedDecodeDivisorDefault);
  CHECK(kMixedDecodeDivisorDefault == 0);
  CHECK(AttentionBackend(c).mixed_decode_divisor() == 0);
  env.set("4");
  CHECK(AttentionBackend(c).mixed_decode_divisor() == 4);
  env.set("1");
  CHECK(AttentionBackend(c).mixed_decode_divisor() == 1);
  env.set("0");
  CHECK(AttentionBackend(c).mixed_decode_divisor() == 0);
  env.set("65535");
  CHECK(AttentionBackend(c).mixed_decode_divisor() == 65535);
  AttentionBackend a(c);
  for (const char* bad : {"-1", "-2", "4x", "65536", "99999999999999999999", " 4", "four"}) {
    INFO("GRAPHATTN_MIXED_DECODE_DIVISOR=" << std::string(bad));
    env.set(bad);
    const std::string want = "GRAPHATTN_MIXED_DECODE_DIVISOR=\"" + std::string(bad) +
                             "\" is not supported; supported: an integer 0..65535";
    CHECK_THROWS_WITH_AS(AttentionBackend{c}, doctest::Contains(want.c_str()), Error);
  }
  CHECK(a.mixed_decode_divisor() == 65535);  // made before: keeps its divisor
  CHECK_THROWS_WITH_AS(a.mixed_decode_max_splits(4), doctest::Contains("call prepare() first"),
                       Error);
}
