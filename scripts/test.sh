#!/usr/bin/env bash
# The test command: installs what is missing, builds, runs every test through ctest.
# GPU tests run where a GPU is present and skip with a message elsewhere.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
"$root/scripts/install_deps.sh"
"$root/scripts/build.sh"
cuda="${CUDA_HOME:-/usr/local/cuda}"
export LD_LIBRARY_PATH="$cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
cd "${BUILD_DIR:-$root/build}"
ctest --output-on-failure "$@"
