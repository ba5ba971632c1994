#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Runs graphattn-bench on a GPU machine: every part (decode, the 32-layer step, capture, prefill)
# with the peer (tools/peer_sdpa.py, PyTorch SDPA) timed in the same run. Writes OUT_DIR/bench.txt
# and OUT_DIR/bench.json; tools/plot_bench.py turns the JSON into the README's plot.
#
#   scripts/bench.sh OUT_DIR [BENCH_BINARY]
set -euo pipefail
. "$(dirname "$0")/env.sh"
require_args $# 1 "OUT_DIR [BENCH_BINARY]"
out="$1"
bin="${2:-${BUILD_DIR:-$root/build}/graphattn-bench}"
export PYTHONUNBUFFERED=1
mkdir -p "$out"
cd "$root"
"$bin" --json "$out/bench.json" --peer-script "$root/tools/peer_sdpa.py" 2>&1 | tee "$out/bench.txt"
