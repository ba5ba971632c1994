#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The test command: installs what is missing, builds, runs every test through ctest.
# GPU tests run where a GPU is present and skip with a message elsewhere.
set -euo pipefail
. "$(dirname "$0")/env.sh"
"$root/scripts/install_deps.sh"
"$root/scripts/build.sh"
cd "${BUILD_DIR:-$root/build}"
ctest --output-on-failure "$@"
