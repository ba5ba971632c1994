#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The main job: installs what is missing (scripts/install_deps.sh --main), builds only the
# library and graphattn-warmup into ${BUILD_DIR:-build} (showing the build's progress), and runs
# graphattn-warmup on the built-in default model (llama-3-8b). Extra arguments go to
# graphattn-warmup (see --help). scripts/test.sh builds everything else in the same folder.
set -euo pipefail
. "$(dirname "$0")/env.sh"
"$root/scripts/install_deps.sh" --main
build="${BUILD_DIR:-$root/build}"
if [ ! -f "$build/CMakeCache.txt" ]; then
  # A new build folder: no tests, so doctest is not needed (scripts/build.sh turns them on).
  echo "warmup: configuring $build"
  cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release -DCUDAToolkit_ROOT="$cuda" \
    -DGRAPHATTN_BUILD_TESTS=OFF >/dev/null
fi
echo "warmup: building graphattn-warmup and the library it links ($(nproc) jobs)"
cmake --build "$build" --target graphattn-warmup -j "$(nproc)"
exec "$build/graphattn-warmup" "$@"
