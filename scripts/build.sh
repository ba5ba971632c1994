#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Configures and builds everything (library, tools, tests) into ${BUILD_DIR:-build} (Release).
set -euo pipefail
. "$(dirname "$0")/env.sh"
build="${BUILD_DIR:-$root/build}"
# Tests on explicitly: the folder may have been configured by scripts/warmup.sh without them.
cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release -DCUDAToolkit_ROOT="$cuda" \
  -DGRAPHATTN_BUILD_TESTS=ON >/dev/null
cmake --build "$build" -j "$(nproc)"
