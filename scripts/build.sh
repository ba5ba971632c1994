#!/usr/bin/env bash
# Configures and builds graphattn into ${BUILD_DIR:-build} (Release).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="${BUILD_DIR:-$root/build}"
cuda="${CUDA_HOME:-/usr/local/cuda}"
export PATH="$cuda/bin:$PATH"
cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release -DCUDAToolkit_ROOT="$cuda" >/dev/null
cmake --build "$build" -j "$(nproc)"
