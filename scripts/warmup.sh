#!/usr/bin/env bash
# The main job: installs what is missing, builds, runs graphattn-warmup on the built-in default
# model (llama-3-8b). Extra arguments go to graphattn-warmup (see --help).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
"$root/scripts/install_deps.sh"
"$root/scripts/build.sh" >/dev/null
cuda="${CUDA_HOME:-/usr/local/cuda}"
export LD_LIBRARY_PATH="$cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
exec "${BUILD_DIR:-$root/build}/graphattn-warmup" "$@"
