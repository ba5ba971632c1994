#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Plots graphattn-bench's decode table: achieved percentage of the read-only bandwidth (measured
in the same run) per shape, for graphattn and the peer (PyTorch SDPA / cuDNN on contiguous KV).

Usage: plot_bench.py BENCH.json OUT.png

The peer reads contiguous bf16 KV; its percentage is computed from its own bytes (twice
graphattn's for fp8 shapes, the whole context for block-sparse ones, which graphattn reads only
in part).
"""
import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main():
    if len(sys.argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    with open(sys.argv[1]) as f:
        bench = json.load(f)
    read = bench["read_only_gb_per_s"]
    labels, ours, peer = [], [], []
    for r in bench["decode"]:
        labels.append(r["shape"])
        ours.append(r["percent_of_read_only"])
        if r.get("peer_us"):
            # The peer reads the whole context as contiguous bf16 K and V (fp8, block-sparse and
            # legacy rows included): the bench's 8 KV heads of head_size, 2 bytes, K and V.
            kv_heads = r.get("num_kv_heads", 8)
            peer_bytes = r["batch"] * r["len"] * kv_heads * r["head_size"] * 2 * 2
            peer.append(100.0 * peer_bytes / r["peer_us"] / 1e3 / read)
        else:
            peer.append(0.0)
    x = range(len(labels))
    w = 0.4
    fig, ax = plt.subplots(figsize=(11, 4.2))
    ax.bar([i - w / 2 for i in x], ours, w, label="graphattn (paged)")
    ax.bar([i + w / 2 for i in x], peer, w, label="PyTorch SDPA / cuDNN (contiguous KV)")
    ax.axhline(100, color="gray", lw=0.8, ls="--")
    ax.set_xticks(list(x))
    ax.set_xticklabels(labels, rotation=30, ha="right")
    ax.set_ylabel("% of read-only bandwidth")
    ax.set_ylim(0, 125)
    ax.set_title(f"Decode attention, {bench['device']}: read-only bandwidth {read:.0f} GB/s "
                 f"measured in the same run")
    ax.legend(loc="upper center", ncol=2, frameon=False)
    fig.tight_layout()
    fig.savefig(sys.argv[2], dpi=110)
    return 0


if __name__ == "__main__":
    sys.exit(main())
