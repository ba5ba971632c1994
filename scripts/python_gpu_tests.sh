#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The Python package's tests on a GPU machine, without pip installing anything: the package is
# taken from python/ (PYTHONPATH) and the library from the build (GRAPHATTN_LIBRARY), so a
# machine with no package registry and no setuptools runs them. Needs python3 with pytest,
# NumPy and PyTorch (CuPy and JAX are used when present). GRAPHATTN_REQUIRE_GPU=1 makes every
# GPU test that would skip fail instead. Writes OUT_DIR/python-tests.log and
# OUT_DIR/python-junit.xml; the exit status is pytest's.
#
#   scripts/python_gpu_tests.sh OUT_DIR [BUILD_DIR]      (BUILD_DIR: $BUILD_DIR or build/)
#
# PYTHON picks the interpreter (default python3); extra pytest arguments go in PYTEST_ARGS.
set -uo pipefail
. "$(dirname "$0")/env.sh"
require_args $# 1 "OUT_DIR [BUILD_DIR]"
out="$1"
build="$(cd "${2:-${BUILD_DIR:-$root/build}}" 2>/dev/null && pwd)" || {
  echo "python_gpu_tests: build directory ${2:-${BUILD_DIR:-$root/build}} not found" >&2
  exit 2
}
python="${PYTHON:-python3}"
if [ ! -f "$build/libgraphattn.so" ]; then
  echo "python_gpu_tests: $build/libgraphattn.so not found; build it first (scripts/build.sh," \
       "or cmake --build $build --target graphattn_shared graphattn-warmup)" >&2
  exit 2
fi
if ! "$python" -c "import pytest" 2>/dev/null; then
  echo "python_gpu_tests: $python cannot import pytest; install it (offline: $python -m pip" \
       "install --no-index --find-links WHEEL_DIR pytest)" >&2
  exit 2
fi
mkdir -p "$out"
export GRAPHATTN_LIBRARY="$build/libgraphattn.so"
export PYTHONPATH="$root/python${PYTHONPATH:+:$PYTHONPATH}"
export GRAPHATTN_REQUIRE_GPU="${GRAPHATTN_REQUIRE_GPU:-1}"
export PYTHONUNBUFFERED=1
cd "$build"  # not python/: the tests must import the package through PYTHONPATH
# shellcheck disable=SC2086
"$python" -m pytest "$root/python/tests" -v -rs -p no:cacheprovider \
  --junitxml="$out/python-junit.xml" ${PYTEST_ARGS:-} 2>&1 | tee "$out/python-tests.log"
exit "${PIPESTATUS[0]}"
