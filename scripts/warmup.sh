#!/usr/bin/env bash
# The main job: installs what is missing, builds, runs graphattn-warmup on the built-in default
# model (llama-3-8b). Extra arguments go to graphattn-warmup (see --help).
set -euo pipefail
. "$(dirname "$0")/env.sh"
"$root/scripts/install_deps.sh"
"$root/scripts/build.sh" >/dev/null
exec "${BUILD_DIR:-$root/build}/graphattn-warmup" "$@"
