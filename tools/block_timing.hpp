// SPDX-License-Identifier: Apache-2.0
// graphattn-bench --block-timing: the summary of one decode launch's per-block records, which
// the decode kernel's experiment build writes (templates/decode.cu, GA_DECODE_TIMING: per block
// 64 words: %globaltimer / clock64 at entry, %smid, tiles, bytes a tile, seq_len; per warp
// (%globaltimer, clock64) after the prologue, at the first tile's arrival, after the last
// tile, after the output; thread 0's block events after the wait at words 40-49, which
// scripts/decode_stage_times.py reads and this summary does not). Host code only (no CUDA), so
// the CPU tests check it on made-up records. Times are %globaltimer ns relative to the launch's
// first block entry.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

namespace graphattn::bench {

constexpr int kTimingWords = 64;  // GA_TIMING_WORDS in templates/decode.cu

struct BlockRecord {
  int id = 0, sm = 0, wave = 0;
  double start = 0, prologue = 0, first = 0, last = 0, end = 0;  // ns from the launch's start
  double bytes = 0;
};

struct TimingSummary {
  std::vector<BlockRecord> blocks;  // the blocks that wrote a full record
  int incomplete = 0;               // blocks with a missing stamp (not summarized)
  double span_ns = 0;               // last block end - first block entry
  std::string text;                 // the printed summary
};

namespace timing_detail {

inline double pct(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const double at = q * (v.size() - 1);
  const size_t lo = static_cast<size_t>(std::floor(at));
  const size_t hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (v[hi] - v[lo]) * (at - lo);
}

inline std::string dist(const std::vector<double>& v, double scale = 1e-3) {
  char b[160];
  std::snprintf(b, sizeof b, "min %.2f p10 %.2f p50 %.2f p90 %.2f max %.2f", pct(v, 0) * scale,
                pct(v, 0.1) * scale, pct(v, 0.5) * scale, pct(v, 0.9) * scale, pct(v, 1) * scale);
  return b;
}

}  // namespace timing_detail

// words: blocks x kTimingWords as the kernel left them (0 where nothing was written); warps:
// GA_DECODE_WARPS; event_us: the launch's event time; rd_us: the same-flush read of the same
// bytes (0: unknown).
inline TimingSummary summarize_block_timing(const std::vector<uint64_t>& words, int warps,
                                            double event_us, double rd_us) {
  using timing_detail::dist;
  using timing_detail::pct;
  TimingSummary out;
  const int n = static_cast<int>(words.size() / kTimingWords);
  // Raw stamps.
  struct Raw {
    uint64_t entry, entry_clk, pro = 0, first = ~0ull, last = 0, end = 0, pro_clk = 0,
                               first_clk = ~0ull, last_clk = 0, end_clk = 0;
    int sm;
    double bytes;
  };
  std::vector<Raw> raws;
  std::vector<int> ids;
  std::vector<uint64_t> all_gt;
  for (int b = 0; b < n; ++b) {
    const uint64_t* w = words.data() + static_cast<size_t>(b) * kTimingWords;
    Raw r{};
    r.entry = w[0];
    r.entry_clk = w[1];
    r.sm = static_cast<int>(w[2]);
    r.bytes = static_cast<double>(w[3]) * static_cast<double>(w[4]);
    r.first = r.first_clk = ~0ull;
    bool ok = r.entry != 0;
    int warps_with_tiles = 0;
    for (int k = 0; k < warps; ++k) {
      const uint64_t* s = w + 8 + 8 * k;
      if (s[0] == 0 || s[6] == 0) ok = false;  // every warp has a prologue and an output stamp
      r.pro = std::max(r.pro, s[0]);
      r.pro_clk = std::max(r.pro_clk, s[1]);
      r.end = std::max(r.end, s[6]);
      r.end_clk = std::max(r.end_clk, s[7]);
      if (s[2] != 0) {  // a warp without tiles has no first and last tile stamps
        ++warps_with_tiles;
        r.first = std::min(r.first, s[2]);
        r.first_clk = std::min(r.first_clk, s[3]);
        r.last = std::max(r.last, s[4]);
        r.last_clk = std::max(r.last_clk, s[5]);
      }
      for (int e = 0; e < 8; e += 2)
        if (s[e]) all_gt.push_back(s[e]);
    }
    if (r.entry) all_gt.push_back(r.entry);
    if (!ok || warps_with_tiles == 0) {
      ++out.incomplete;
      continue;
    }
    raws.push_back(r);
    ids.push_back(b);
  }
  std::string& t = out.text;
  char line[512];
  auto add = [&](const char* fmt, auto... a) {  // (fmt: a literal of this function)
    if constexpr (sizeof...(a) == 0) {
      t += fmt;
    } else {
      std::snprintf(line, sizeof line, fmt, a...);
      t += line;
    }
  };
  if (raws.empty()) {
    add("block timing: no complete record among %d blocks\n", n);
    return out;
  }
  uint64_t t0 = ~0ull;
  for (const Raw& r : raws) t0 = std::min(t0, r.entry);
  // %globaltimer's step as seen here, and the SM clock from the long blocks' clock64 / ns.
  std::sort(all_gt.begin(), all_gt.end());
  all_gt.erase(std::unique(all_gt.begin(), all_gt.end()), all_gt.end());
  uint64_t step = ~0ull;
  for (size_t i = 1; i < all_gt.size(); ++i) step = std::min(step, all_gt[i] - all_gt[i - 1]);
  std::vector<double> ghz;
  for (const Raw& r : raws)
    if (r.end - r.entry > 20000 && r.end_clk > r.entry_clk)
      ghz.push_back(static_cast<double>(r.end_clk - r.entry_clk) / (r.end - r.entry));
  const double clk_ghz = ghz.empty() ? 0 : pct(ghz, 0.5);
  for (size_t i = 0; i < raws.size(); ++i) {
    const Raw& r = raws[i];
    BlockRecord b;
    b.id = ids[i];
    b.sm = r.sm;
    b.bytes = r.bytes;
    b.start = static_cast<double>(r.entry - t0);
    b.end = static_cast<double>(r.end - t0);
    // The short intervals from clock64 (same SM as the entry stamp) where the clock is known:
    // %globaltimer may step coarser than they are long.
    if (clk_ghz > 0) {
      b.prologue = b.start + (r.pro_clk - r.entry_clk) / clk_ghz;
      b.first = b.start + (r.first_clk - r.entry_clk) / clk_ghz;
      b.last = b.end - (r.end_clk - r.last_clk) / clk_ghz;
    } else {
      b.prologue = static_cast<double>(r.pro - t0);
      b.first = static_cast<double>(r.first - t0);
      b.last = static_cast<double>(r.last - t0);
    }
    out.blocks.push_back(b);
  }
  std::vector<BlockRecord>& bl = out.blocks;
  double span = 0, total_bytes = 0;
  for (const auto& b : bl) {
    span = std::max(span, b.end);
    total_bytes += b.bytes;
  }
  out.span_ns = span;
  // Waves: per SM, blocks in start order; the most blocks at once on that SM is its slots; a
  // block's wave is its rank / slots.
  std::map<int, std::vector<BlockRecord*>> by_sm;
  for (auto& b : bl) by_sm[b.sm].push_back(&b);
  int max_wave = 0;
  std::vector<double> handoff;  // a later block's start - the end of the block it followed
  for (auto& [sm, v] : by_sm) {
    std::sort(v.begin(), v.end(),
              [](const BlockRecord* a, const BlockRecord* b) { return a->start < b->start; });
    int slots = 1;
    for (size_t i = 0; i < v.size(); ++i) {
      int live = 0;
      for (size_t k = 0; k < v.size(); ++k)
        if (v[k]->start <= v[i]->start && v[k]->end > v[i]->start) ++live;
      slots = std::max(slots, live);
    }
    for (size_t i = 0; i < v.size(); ++i) {
      v[i]->wave = static_cast<int>(i) / slots;
      max_wave = std::max(max_wave, v[i]->wave);
      if (v[i]->wave > 0) {  // the latest end on this SM at or before its start
        double prev = -1;
        for (size_t k = 0; k < i; ++k)
          if (v[k]->end <= v[i]->start) prev = std::max(prev, v[k]->end);
        if (prev >= 0) handoff.push_back(v[i]->start - prev);
      }
    }
  }
  add("blocks %zu (incomplete %d) on %zu SMs, %.1f MiB; globaltimer step %llu ns (%zu distinct "
      "stamps), SM clock %.3f GHz (clock64 / globaltimer of blocks > 20 us)\n",
      bl.size(), out.incomplete, by_sm.size(), total_bytes / (1 << 20),
      static_cast<unsigned long long>(step == ~0ull ? 0 : step), all_gt.size(), clk_ghz);
  add("event %.2f us; blocks' span (first entry to last output) %.2f us; event - span %.2f us%s\n",
      event_us, span * 1e-3, event_us - span * 1e-3, rd_us > 0 ? "" : " (no rd)");
  if (rd_us > 0)
    add("same-flush read of these bytes (rd) %.2f us: event - rd %.2f us, span - rd %.2f us\n",
        rd_us, event_us - rd_us, span * 1e-3 - rd_us);
  // Per wave.
  for (int w = 0; w <= max_wave; ++w) {
    std::vector<double> st, en, dur, pro, wait, stream, epi, rate;
    for (const auto& b : bl) {
      if (b.wave != w) continue;
      st.push_back(b.start);
      en.push_back(b.end);
      dur.push_back(b.end - b.start);
      pro.push_back(b.prologue - b.start);
      wait.push_back(b.first - b.prologue);
      stream.push_back(b.last - b.first);
      epi.push_back(b.end - b.last);
      if (b.last > b.first) rate.push_back(b.bytes / (b.last - b.first));  // GB/s
    }
    add("wave %d: %zu blocks (us)\n", w, st.size());
    add("  start          %s\n", dist(st).c_str());
    add("  end            %s\n", dist(en).c_str());
    add("  duration       %s\n", dist(dur).c_str());
    add("  prologue       %s  (entry -> first copies issued: seq_lens, block table)\n",
        dist(pro).c_str());
    add("  first tile     %s  (-> the first tile has arrived)\n", dist(wait).c_str());
    add("  stream         %s  (-> the last tile computed)\n", dist(stream).c_str());
    add("  epilogue       %s  (-> the output written)\n", dist(epi).c_str());
    add("  block GB/s     %s  (bytes / stream)\n", dist(rate, 1).c_str());
  }
  if (!handoff.empty())
    add("handoff (a later wave's start - the end before it on its SM): %s us\n",
        dist(handoff).c_str());
  // Launch ramp: the first wave's starts; tail: the last ends per SM.
  {
    std::vector<double> s0;
    for (const auto& b : bl)
      if (b.wave == 0) s0.push_back(b.start);
    add("ramp: first-wave starts %s us (first to last start %.2f us)\n", dist(s0).c_str(),
        (pct(s0, 1) - pct(s0, 0)) * 1e-3);
  }
  std::vector<double> sm_last, sm_bytes, sm_busy, sm_gbs, sm_first;
  double idle_tail = 0, idle_head = 0, idle_inside = 0;
  for (auto& [sm, v] : by_sm) {
    double first = 1e300, last = 0, bytes = 0;
    std::vector<std::pair<double, double>> iv;
    for (const BlockRecord* b : v) {
      first = std::min(first, b->start);
      last = std::max(last, b->end);
      bytes += b->bytes;
      iv.push_back({b->start, b->end});
    }
    std::sort(iv.begin(), iv.end());
    double busy = 0, cur_s = iv[0].first, cur_e = iv[0].second;
    for (size_t i = 1; i < iv.size(); ++i) {
      if (iv[i].first > cur_e) {
        busy += cur_e - cur_s;
        idle_inside += iv[i].first - cur_e;
        cur_s = iv[i].first;
      }
      cur_e = std::max(cur_e, iv[i].second);
    }
    busy += cur_e - cur_s;
    sm_first.push_back(first);
    sm_last.push_back(last);
    sm_bytes.push_back(bytes);
    sm_busy.push_back(busy);
    sm_gbs.push_back(bytes / (last - first));
    idle_tail += span - last;
    idle_head += first;
  }
  const double nsm = static_cast<double>(by_sm.size());
  add("tail: block ends %s us; per-SM last end %s us (first SM done to last %.2f us)\n",
      dist([&] {
        std::vector<double> e;
        for (const auto& b : bl) e.push_back(b.end);
        return e;
      }())
          .c_str(),
      dist(sm_last).c_str(), (pct(sm_last, 1) - pct(sm_last, 0)) * 1e-3);
  add("per SM: first start %s us; busy (a block resident) %s us; bytes %s MiB; GB/s (bytes / "
      "first start to last end) %s\n",
      dist(sm_first).c_str(), dist(sm_busy).c_str(), dist(sm_bytes, 1.0 / (1 << 20)).c_str(),
      dist(sm_gbs, 1).c_str());
  add("SM idle inside the span, averaged over SMs: before its first block %.2f us, between "
      "blocks (no block resident) %.2f us, after its last block %.2f us\n",
      idle_head / nsm * 1e-3, idle_inside / nsm * 1e-3, idle_tail / nsm * 1e-3);
  // Streaming blocks over time (a block streams from its first tile's arrival to its last
  // tile's end), in the prologue (entry to its first copies), and how long before the end the
  // count falls below fractions of the first wave: each block keeps a bounded number of bytes in
  // flight, so too few streaming blocks cannot keep the memory busy.
  auto streaming = [&](double at) {
    int n = 0;
    for (const auto& b : bl) n += b.first <= at && at < b.last;
    return n;
  };
  auto in_prologue = [&](double at) {
    int n = 0;
    for (const auto& b : bl) n += b.start <= at && at < b.prologue;
    return n;
  };
  int wave0 = 0;
  for (const auto& b : bl) wave0 += b.wave == 0;
  std::vector<double> at;
  for (int i = 0; i <= 20; ++i) at.push_back(i * 500.0);  // the start, every 0.5 us
  for (int w = 1; w <= max_wave; ++w) {                   // each later wave's starts, 12 steps
    double lo = 1e300, hi = 0;
    for (const auto& b : bl)
      if (b.wave == w) {
        lo = std::min(lo, b.start);
        hi = std::max(hi, b.first);
      }
    for (int i = 0; i <= 12; ++i) at.push_back(lo + (hi - lo) * i / 12);
  }
  for (double back : {30.0, 20.0, 15.0, 10.0, 8.0, 6.0, 5.0, 4.0, 3.0, 2.0, 1.0, 0.5})
    at.push_back(span - back * 1000);
  add("streaming blocks (in the prologue) at t us:");
  int k = 0;
  for (double a : at) {
    if (a < 0 || a > span) continue;
    if (k++ % 10 == 0) add("\n ");
    add(" %.1f:%d(%d)", a * 1e-3, streaming(a), in_prologue(a));
  }
  add("\n");
  add("streaming blocks fall below (of %d in the first wave), for good, at us before the end:",
      wave0);
  for (int frac : {2, 4, 8}) {
    const int limit = wave0 / frac;
    if (limit < 1) continue;
    double from = span;  // the first moment from which the count stays below limit
    for (double a = span; a >= 0; a -= 50) {
      if (streaming(a) >= limit) break;
      from = a;
    }
    add(" < %d: %.2f", limit, (span - from) * 1e-3);
  }
  add("\n");
  // Each SM's first-wave block rate (bytes / stream), by %smid; '*' marks an SM that held one
  // first-wave block.
  add("first-wave block GB/s by SM (smid:rate, * one block on that SM):");
  k = 0;
  for (auto& [sm, v] : by_sm) {
    double sum = 0;
    int n = 0;
    for (const BlockRecord* b : v)
      if (b->wave == 0 && b->last > b->first) {
        sum += b->bytes / (b->last - b->first);
        ++n;
      }
    if (n == 0) continue;
    if (k++ % 12 == 0) add("\n ");
    add(" %d:%s%.1f", sm, n == 1 ? "*" : "", sum / n);
  }
  add("\n");
  return out;
}

}  // namespace graphattn::bench
