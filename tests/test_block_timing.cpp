// SPDX-License-Identifier: Apache-2.0
// graphattn-bench --block-timing's summary (tools/block_timing.hpp) on made-up records.
#include <doctest/doctest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "tools/block_timing.hpp"

namespace {

using graphattn::bench::kTimingWords;
using graphattn::bench::summarize_block_timing;

// One block's record as the kernel writes it: %globaltimer ns, clock64 at 1 cycle a ns.
void put(std::vector<uint64_t>& w, int b, int sm, uint64_t start, uint64_t pro, uint64_t first,
         uint64_t last, uint64_t end, int warps, uint64_t tiles = 8, uint64_t tile_bytes = 8192) {
  w.resize(std::max(w.size(), static_cast<size_t>(b + 1) * kTimingWords), 0);
  uint64_t* r = w.data() + static_cast<size_t>(b) * kTimingWords;
  r[0] = start;
  r[1] = start;
  r[2] = sm;
  r[3] = tiles;
  r[4] = tile_bytes;
  r[5] = 1024;
  for (int k = 0; k < warps; ++k) {
    uint64_t* s = r + 8 + 8 * k;
    const uint64_t v[8] = {pro, pro, first, first, last, last, end, end};
    for (int e = 0; e < 8; ++e) s[e] = v[e];
  }
}

}  // namespace

TEST_CASE("block timing: waves, handoffs, tail and span from per-block records") {
  std::vector<uint64_t> w;
  const uint64_t t0 = 1'000'000'000;
  // Two SMs, one block at a time each, two waves; SM 1's second block ends 10 us after SM 0's.
  put(w, 0, 0, t0, t0 + 1000, t0 + 2000, t0 + 40000, t0 + 41000, 4);
  put(w, 1, 1, t0 + 500, t0 + 1500, t0 + 2500, t0 + 40500, t0 + 41500, 4);
  put(w, 2, 0, t0 + 42000, t0 + 43000, t0 + 44000, t0 + 80000, t0 + 81000, 4);
  put(w, 3, 1, t0 + 43500, t0 + 44500, t0 + 45500, t0 + 90000, t0 + 91000, 4);
  // A fifth block that never wrote its output stamps: counted as incomplete, not summarized.
  put(w, 4, 0, t0 + 100, t0 + 200, t0 + 300, t0 + 400, 0, 4);
  const auto s = summarize_block_timing(w, 4, 95.0, 80.0);
  CHECK(s.incomplete == 1);
  REQUIRE(s.blocks.size() == 4);
  CHECK(s.span_ns == doctest::Approx(91000));
  CHECK(s.blocks[0].wave == 0);
  CHECK(s.blocks[1].wave == 0);
  CHECK(s.blocks[2].wave == 1);
  CHECK(s.blocks[3].wave == 1);
  CHECK(s.blocks[3].start == doctest::Approx(43500));
  CHECK(s.blocks[3].first == doctest::Approx(45500));  // from clock64 at 1 GHz
  CHECK(s.blocks[3].last == doctest::Approx(90000));
  CHECK(s.blocks[0].bytes == doctest::Approx(8 * 8192));
  const std::string& t = s.text;
  CHECK_MESSAGE(t.find("blocks 4 (incomplete 1) on 2 SMs") != std::string::npos, t);
  CHECK_MESSAGE(t.find("event - span 4.00 us") != std::string::npos, t);
  CHECK_MESSAGE(t.find("event - rd 15.00 us, span - rd 11.00 us") != std::string::npos, t);
  CHECK_MESSAGE(t.find("SM clock 1.000 GHz") != std::string::npos, t);
  // Handoffs: 42000 - 41000 and 43500 - 41500.
  CHECK_MESSAGE(t.find("handoff (a later wave's start - the end before it on its SM): min 1.00") !=
                    std::string::npos,
                t);
  CHECK_MESSAGE(t.find("max 2.00 us") != std::string::npos, t);
  // SM 0 is done at 81 us, SM 1 at 91 us.
  CHECK_MESSAGE(t.find("(first SM done to last 10.00 us)") != std::string::npos, t);
  // Idle after the last block, averaged: (10 + 0) / 2 us.
  CHECK_MESSAGE(t.find("after its last block 5.00 us") != std::string::npos, t);
  // The last block streams alone from 80 us (SM 0's last tile) to 90 us; nothing after 90 us:
  // fewer than 1 (of 2 first-wave blocks) for the last 1 us.
  CHECK_MESSAGE(t.find("(of 2 in the first wave), for good, at us before the end: < 1: 1.00") !=
                    std::string::npos,
                t);
  // First-wave rates: 64 KiB over 38 us on SM 0 and on SM 1 = 1.7 GB/s, one block each.
  CHECK_MESSAGE(t.find(" 0:*1.7 1:*1.7\n") != std::string::npos, t);
}

TEST_CASE("block timing: records without a complete block say so") {
  std::vector<uint64_t> w(2 * kTimingWords, 0);
  const auto s = summarize_block_timing(w, 4, 10.0, 0.0);
  CHECK(s.blocks.empty());
  CHECK(s.incomplete == 2);
  CHECK(s.text.find("no complete record among 2 blocks") != std::string::npos);
}
