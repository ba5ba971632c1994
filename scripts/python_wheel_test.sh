#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The Python package as a user gets it from a package index (ctest's `python` test):
#   1. `pip wheel ./python` with GRAPHATTN_BUILD_DIR=BUILD_DIR (this build's binaries, nothing
#      compiled again) into BUILD_DIR/wheelhouse; the wheel must be tagged manylinux_2_N_<arch>,
#      hold libgraphattn.so and both tools, and declare the NVRTC wheel;
#   2. a fresh venv in a scratch folder with nothing of the source tree beside it: the wheel (pip
#      fetches nvidia-cuda-nvrtc from PyPI), numpy and pytest;
#   3. the CPU tests (a copy of python/tests, run from the scratch folder, GRAPHATTN_* unset);
#   4. both console tools from the venv's bin/: --version, graphattn-cache compile,
#      graphattn-warmup on llama-3-8b into an empty cache (compiles: no GPU here);
#   5. the prebuilt-kernels wheel (python/kernels) made for llama-3-8b on sm_90 only (CI's time),
#      installed with its dependencies (the NVRTC wheel of the minor it was compiled with);
#      graphattn-warmup into another empty cache must now compile nothing;
#   6. where a private mount namespace is allowed (root, unshare -m), the same warmup with the
#      CUDA toolkit hidden: libnvrtc comes from the NVRTC wheel.
#
#   scripts/python_wheel_test.sh BUILD_DIR        (PYTHON picks the interpreter: python3)
set -euo pipefail
. "$(dirname "$0")/env.sh"
require_args $# 1 "BUILD_DIR"
build="$(cd "$1" && pwd)"
python="${PYTHON:-python3}"
say() { echo "python wheel test: $*"; }
scratch="$(mktemp -d)"
trap 'rm -rf "$scratch"' EXIT
pipq=(--disable-pip-version-check --no-input -q)

# 1. The wheels.
wheelhouse="$build/wheelhouse"
rm -rf "$wheelhouse"
mkdir -p "$wheelhouse"
if [ ! -x "$build/python-build-venv/bin/python" ]; then
  "$python" -m venv "$build/python-build-venv"
fi
say "pip wheel $root/python (GRAPHATTN_BUILD_DIR=$build)"
env -u GRAPHATTN_LIBRARY GRAPHATTN_BUILD_DIR="$build" "$build/python-build-venv/bin/pip" \
  "${pipq[@]}" wheel --no-deps -w "$wheelhouse" "$root/python"
wheel=$(ls "$wheelhouse"/graphattn-*.whl)
say "built $(basename "$wheel")"
case "$(basename "$wheel")" in
  graphattn-*-py3-none-manylinux_2_*_"$(uname -m)".whl) ;;
  *)
    echo "python wheel test: $(basename "$wheel") is not tagged manylinux_2_N_$(uname -m)" >&2
    exit 1
    ;;
esac
"$python" - "$wheel" <<'PY'
import sys, zipfile
names = zipfile.ZipFile(sys.argv[1]).namelist()
for need in ("graphattn/libgraphattn.so", "graphattn/bin/graphattn-warmup",
             "graphattn/bin/graphattn-cache"):
    assert need in names, "%s lacks %s" % (sys.argv[1], need)
meta = [n for n in names if n.endswith(".dist-info/METADATA")][0]
text = zipfile.ZipFile(sys.argv[1]).read(meta).decode()
assert "Requires-Dist: nvidia-cuda-nvrtc" in text, text
assert "License: Apache-2.0" in text or "License-Expression: Apache-2.0" in text, text
ep = [n for n in names if n.endswith(".dist-info/entry_points.txt")][0]
eps = zipfile.ZipFile(sys.argv[1]).read(ep).decode()
assert "graphattn-warmup = graphattn._tools:warmup_main" in eps, eps
assert "graphattn-cache = graphattn._tools:cache_main" in eps, eps
PY
say "pip wheel $root/python/kernels (llama-3-8b, sm_90)"
env -u GRAPHATTN_LIBRARY GRAPHATTN_BUILD_DIR="$build" GRAPHATTN_KERNEL_MODELS=llama-3-8b \
  GRAPHATTN_KERNEL_ARCHS=90 "$build/python-build-venv/bin/pip" "${pipq[@]}" wheel --no-deps \
  -w "$wheelhouse" "$root/python/kernels"
kernels_wheel=$(ls "$wheelhouse"/graphattn_kernels-*.whl)

# 2. A fresh venv, away from the source tree.
venv="$scratch/venv"
say "fresh venv $venv: pip install $(basename "$wheel") numpy pytest"
"$python" -m venv "$venv"
cd "$scratch"
# As a user's shell has it: no LD_LIBRARY_PATH (env.sh's points at the toolkit), so the binaries
# find libnvrtc through their RPATH in the NVRTC wheel.
clean_env=(env -u GRAPHATTN_LIBRARY -u GRAPHATTN_BUILD_DIR -u PYTHONPATH -u GRAPHATTN_CACHE_DIR
  -u GRAPHATTN_CACHE_DIRS -u GRAPHATTN_REMOTE_CACHE -u GRAPHATTN_LOG_LEVEL -u LD_LIBRARY_PATH)
"${clean_env[@]}" "$venv/bin/pip" "${pipq[@]}" install "$wheel" numpy pytest
nvrtc_lib=$(ls "$venv"/lib/python3*/site-packages/nvidia/cu*/lib/libnvrtc.so.* 2>/dev/null |
  head -1 || true)
say "NVRTC wheel library: ${nvrtc_lib:-none}"

# 3. The CPU tests from a copy, run where no source tree is.
cp -r "$root/python/tests" "$scratch/tests"
say "pytest (the installed package, from $scratch)"
# GRAPHATTN_SOURCE_ROOT: test_faces.py reads graphattn.h from the tree the wheel was built from
# and checks the installed package's ctypes declarations against it (the package still comes
# from the venv).
"${clean_env[@]}" GRAPHATTN_SOURCE_ROOT="$root" "$venv/bin/python" -m pytest "$scratch/tests" \
  -q -rs -p no:cacheprovider

# 4. The console tools.
export HOME="$scratch/home"  # the tools' default cache directory: ~/.cache/graphattn
mkdir -p "$HOME"
for tool in graphattn-warmup graphattn-cache; do
  "${clean_env[@]}" "$venv/bin/$tool" --version
done
"${clean_env[@]}" "$venv/bin/graphattn-cache" --dir "$scratch/c1" compile \
  --spec cache_write_h128_b16_bf16_kvauto_g1_swa0_cap0_nhd_sm90
"${clean_env[@]}" "$venv/bin/graphattn-cache" --dir "$scratch/c1" verify
warm() {  # warm DIR: runs graphattn-warmup into DIR; prints "compiled hits"
  "${clean_env[@]}" "$venv/bin/graphattn-warmup" --arch 90 --cache-dir "$1" --json \
    >"$1.json"
  "$venv/bin/python" -c 'import json,sys; c=json.load(open(sys.argv[1]))["compile"]
print(c["compiled"], c["hits"])' "$1.json"
}
read -r compiled hits < <(warm "$scratch/c2")
say "graphattn-warmup without the kernels wheel: $compiled compiled, $hits hits"
# llama-3-8b's 5 kernels: the cache write, the decode, the prefill and the mixed graphs' decodes
# (_dsp, GRAPHATTN_MIXED_DECODE_DIVISOR=0, the default since session 13, and _dsp_long,
# GRAPHATTN_MIXED_DSP_LONG_TILES=8, the default since session 15).
[ "$compiled" = 5 ] || { echo "expected 5 compiled kernels" >&2; exit 1; }

# 5. The prebuilt kernels, found without configuration. Their dependencies pin the NVRTC wheel
# to the minor they were compiled with (pip may change the one the graphattn wheel brought).
"${clean_env[@]}" "$venv/bin/pip" "${pipq[@]}" install --find-links "$wheelhouse" \
  "$kernels_wheel"
read -r compiled hits < <(warm "$scratch/c3")
say "graphattn-warmup with the kernels wheel: $compiled compiled, $hits hits"
[ "$compiled" = 0 ] && [ "$hits" = 5 ] || {
  echo "expected the kernels wheel to serve all 5 kernels" >&2
  exit 1
}

# 6. No toolkit: NVRTC from the wheel.
cuda_real="$(readlink -f "$cuda")"
if [ -n "$nvrtc_lib" ] && [ "$(id -u)" = 0 ] && unshare -m true 2>/dev/null; then
  say "graphattn-warmup with $cuda_real hidden (NVRTC from the wheel)"
  "${clean_env[@]}" -u LD_LIBRARY_PATH -u CUDA_HOME unshare -m bash -c \
    'mount -t tmpfs none "$1" && shift && "$@"' _ "$cuda_real" \
    "$venv/bin/graphattn-warmup" --arch 90 --cache-dir "$scratch/c4" --model gemma-2-9b
else
  say "skipped the run without the toolkit (needs root and unshare -m)"
fi
say "passed"
