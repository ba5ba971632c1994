#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# graphattn.vllm and graphattn.torch_ops against the real vLLM release from PyPI, on the CPU (as
# ctest's `python_vllm` test runs them):
#   1. a venv with vllm==VLLM_VERSION (graphattn/vllm/__init__.py, the one pin) and pytest,
#      kept between runs in ${GRAPHATTN_VLLM_VENV:-~/.cache/graphattn/vllm-VERSION-pyX.Y}
#      (made under a lock; a fresh machine makes it once: about 4 GB of wheels from PyPI, torch
#      with its CUDA libraries included, which vLLM pins),
#   2. graphattn installed from ./python (GRAPHATTN_BUILD_DIR=BUILD_DIR, as
#      python_cpu_tests.sh) into BUILD_DIR/vllm-site, so runs of different checkouts share the
#      venv without touching each other,
#   3. pytest test_torch_ops.py and test_vllm_plugin.py with that folder on PYTHONPATH (vLLM's
#      plugin loader finds graphattn's entry point there); GPU tests skip without a GPU.
#
#   scripts/python_vllm_tests.sh BUILD_DIR        (PYTHON picks the interpreter: python3)
set -euo pipefail
. "$(dirname "$0")/env.sh"
require_args $# 1 "BUILD_DIR"
build="$(cd "$1" && pwd)"
python="${PYTHON:-python3}"
version="$(sed -n 's/^VLLM_VERSION = "\(.*\)"$/\1/p' "$root/python/graphattn/vllm/__init__.py")"
[ -n "$version" ] || { echo "python_vllm_tests: no VLLM_VERSION in graphattn/vllm/__init__.py" >&2; exit 1; }
pyver="$("$python" -c 'import sys; print("%d.%d" % sys.version_info[:2])')"
venv="${GRAPHATTN_VLLM_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/graphattn/vllm-$version-py$pyver}"
mkdir -p "$(dirname "$venv")"
(
  flock 9
  if [ ! -f "$venv/.graphattn-complete" ]; then
    rm -rf "$venv"
    echo "python_vllm_tests: creating $venv (vllm==$version from PyPI; first run only)"
    start=$(date +%s)
    "$python" -m venv "$venv"
    "$venv/bin/python" -m pip --disable-pip-version-check --no-input install -q \
      "vllm==$version" pytest
    echo "python_vllm_tests: venv made in $(( $(date +%s) - start )) s," \
      "$(du -sm "$venv" | cut -f1) MiB"
    touch "$venv/.graphattn-complete"
  fi
) 9>"$venv.lock"
site="$build/vllm-site"
rm -rf "$site"
echo "python_vllm_tests: pip install --target $site $root/python (GRAPHATTN_BUILD_DIR=$build)"
env -u GRAPHATTN_LIBRARY GRAPHATTN_BUILD_DIR="$build" "$venv/bin/python" -m pip \
  --disable-pip-version-check --no-input install -q --no-deps --target "$site" "$root/python"
cd "$build"
exec env -u GRAPHATTN_LIBRARY -u VLLM_PLUGINS PYTHONPATH="$site" \
  "$venv/bin/python" -m pytest "$root/python/tests/test_torch_ops.py" \
  "$root/python/tests/test_vllm_plugin.py" -rs -p no:cacheprovider
