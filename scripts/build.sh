#!/usr/bin/env bash
# Configures and builds graphattn into ${BUILD_DIR:-build} (Release).
set -euo pipefail
. "$(dirname "$0")/env.sh"
build="${BUILD_DIR:-$root/build}"
cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release -DCUDAToolkit_ROOT="$cuda" >/dev/null
cmake --build "$build" -j "$(nproc)"
