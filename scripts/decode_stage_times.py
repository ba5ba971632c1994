#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""The decode kernel's stages after griddepcontrol.wait, from the experiment build's per-block
records (templates/decode.cu, GA_DECODE_TIMING; graphattn-bench --block-timing N
--block-timing-out PREFIX, e.g. the --try-chain policy chain's PREFIX<row>-chain-rN.u64).

Each record is 64 little-endian uint64 a block: 0, 1 entry (%globaltimer ns, clock64); 2 smid;
3 tiles; per warp w at 8 + 8 w: (globaltimer, clock64) pairs after the prologue, first tile
arrived, last tile computed, output / partial written; thread 0's block events 40 wait returned,
42 query arrived, 44 warps' states in shared memory, 46 split counter's atomic returned, 48 the
last block's combine stores issued. A chain's rows hold its last launch (a stamp older than its
row's entry is an earlier launch's and is dropped).

Intervals inside one block use clock64 (the SM clock, fitted against %globaltimer over all
blocks); intervals between blocks use %globaltimer. Prints one table per file and, with several
files, the medians over them.

  scripts/decode_stage_times.py FILE.u64 [FILE.u64 ...]
"""
import statistics
import struct
import sys

WORDS = 64
WARPS = 4


def rows_of(path):
    data = open(path, "rb").read()
    n = len(data) // (8 * WORDS)
    return [struct.unpack_from("<%dQ" % WORDS, data, i * 8 * WORDS) for i in range(n)]


def pct(xs, q):
    xs = sorted(xs)
    if not xs:
        return float("nan")
    return xs[min(len(xs) - 1, int(q * (len(xs) - 1) + 0.5))]


def stages(path):
    rows = [r for r in rows_of(path) if r[0] != 0]
    # SM clock in GHz: clock64 against %globaltimer between entry and the block's latest stamp
    # of the wait (40) and the counter's atomic (46), where that is over 2 us after entry.
    ghz = []
    for r in rows:
        w = 46 if r[46] > r[40] else 40
        if r[w] > r[0] + 2000:
            ghz.append((r[w + 1] - r[1]) / (r[w] - r[0]))
    clk = statistics.median(ghz) if ghz else 1.755

    def ns(a, b):  # clock64 interval in ns
        return (b - a) / clk

    out = {}
    t0 = min(r[0] for r in rows)
    waits = [r[40] for r in rows if r[40] >= r[0]]
    w0 = min(waits)
    out["blocks"] = [len(rows)]
    out["entry, from the first entry (gt)"] = [r[0] - t0 for r in rows]
    out["prologue done, from entry (clk, slowest warp)"] = [
        ns(r[1], max(r[9 + 8 * w] for w in range(WARPS))) for r in rows]
    out["wait returned, from the first entry (gt)"] = [r[40] - t0 for r in rows]
    out["wait returned, from the first wait (gt)"] = [r[40] - w0 for r in rows]
    out["prologue done -> wait (clk; < 0 none)"] = [
        ns(max(r[9 + 8 * w] for w in range(WARPS)), r[41]) for r in rows]
    out["query arrived, after the wait (clk)"] = [ns(r[41], r[43]) for r in rows]
    out["first tile ready, after the wait (clk, slowest warp)"] = [
        ns(r[41], max(r[11 + 8 * w] for w in range(WARPS))) for r in rows]
    out["tiles computed, after max(query, first tile) (clk, slowest warp)"] = [
        ns(max(r[43], max(r[11 + 8 * w] for w in range(WARPS))),
           max(r[13 + 8 * w] for w in range(WARPS))) for r in rows]
    out["states in smem, after the last warp's tiles (clk)"] = [
        ns(max(r[13 + 8 * w] for w in range(WARPS)), r[45]) for r in rows]
    out["partial written, after the states (clk, slowest warp)"] = [
        ns(r[45], max(r[15 + 8 * w] for w in range(WARPS))) for r in rows]
    at = [r for r in rows if r[46] >= r[40] > 0]
    out["counter atomic returned, after the partial (clk)"] = [
        ns(max(r[15 + 8 * w] for w in range(WARPS)), r[47]) for r in at]
    out["atomic returned, from the first wait (gt)"] = [r[46] - w0 for r in at]
    comb = [r for r in rows if r[48] >= r[40] > 0]
    out["combiners"] = [len(comb)]
    out["combine stores issued, after its atomic (clk)"] = [ns(r[47], r[49]) for r in comb]
    out["combine stores issued, from the first wait (gt)"] = [r[48] - w0 for r in comb]
    out["clock GHz"] = [clk]
    return out


def main(paths):
    per = [stages(p) for p in paths]
    for p, s in zip(paths, per):
        print("== %s" % p)
        for k, v in s.items():
            if len(v) == 1:
                print("  %-66s %s" % (k, ("%.3f" % v[0]) if isinstance(v[0], float) else v[0]))
            else:
                print("  %-66s p10 %7.0f  p50 %7.0f  p90 %7.0f  max %7.0f ns" %
                      (k, pct(v, .1), pct(v, .5), pct(v, .9), max(v)))
    if len(per) > 1:
        print("== medians over the %d files (p50 of each file, then their median; max likewise)" %
              len(per))
        for k in per[0]:
            if len(per[0][k]) == 1:
                continue
            p50 = statistics.median(pct(s[k], .5) for s in per if s[k])
            mx = statistics.median(max(s[k]) for s in per if s[k])
            print("  %-66s p50 %7.0f  max %7.0f ns" % (k, p50, mx))


if __name__ == "__main__":
    if len(sys.argv) < 2:
        print(__doc__)
        sys.exit(2)
    main(sys.argv[1:])
