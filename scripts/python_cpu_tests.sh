#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The Python package's tests through a real install, as ctest's `python` test runs them:
#   1. a venv at BUILD_DIR/python-venv (made once; python3 -m venv),
#   2. pip install numpy pytest into it (once),
#   3. pip install ./python with GRAPHATTN_BUILD_DIR=BUILD_DIR: the package's build step takes
#      libgraphattn.so and graphattn-warmup from that build instead of compiling them again,
#   4. pytest python/tests from outside the source tree, so the installed package is the one
#      imported (GPU tests skip without a GPU).
#
#   scripts/python_cpu_tests.sh BUILD_DIR        (PYTHON picks the interpreter: python3)
set -euo pipefail
. "$(dirname "$0")/env.sh"
require_args $# 1 "BUILD_DIR"
build="$(cd "$1" && pwd)"
python="${PYTHON:-python3}"
venv="$build/python-venv"
pip=("$venv/bin/python" -m pip --disable-pip-version-check --no-input)
if [ ! -x "$venv/bin/python" ]; then
  echo "python tests: creating $venv"
  "$python" -m venv "$venv"
fi
if ! "$venv/bin/python" -c "import numpy, pytest" 2>/dev/null; then
  echo "python tests: pip install numpy pytest"
  "${pip[@]}" install -q numpy pytest
fi
echo "python tests: pip install $root/python (GRAPHATTN_BUILD_DIR=$build)"
env -u GRAPHATTN_LIBRARY GRAPHATTN_BUILD_DIR="$build" \
  "${pip[@]}" install -q --force-reinstall --no-deps "$root/python"
cd "$venv"
exec env -u GRAPHATTN_LIBRARY -u PYTHONPATH "$venv/bin/python" -m pytest "$root/python/tests" \
  -rs -p no:cacheprovider
