#!/usr/bin/env bash
# Assembles OUT_DIR (default .vllm-carry/, git-ignored) for scripts/vllm_gpu_run.sh on a GPU
# machine that has Python 3.12, PyTorch 2.11, Triton and NumPy but no package registry, with a
# 64 MiB limit on what travels:
#   - vLLM VLLM_TORCH_2_11_VERSION (graphattn/vllm/__init__.py: the newest release pinned to
#     PyTorch 2.11; 0.27-0.33 pin 2.13-2.14, whose Python and compiled kernels need them): its
#     Python files and its one kernel library the llama path loads (_C_stable_libtorch, built
#     for PyTorch 2.11), without flash-attn, MoE, MLA and the other compiled extensions;
#   - the Python dependencies vLLM imports on that path (DEPS below: found by importing vLLM's
#     LLM path into a venv holding only PyTorch 2.11, vLLM without dependencies and NumPy, and
#     adding what failed), as cp312 manylinux wheels from PyPI;
#   - a graphattn dist-info with the vllm.general_plugins entry point (the package itself is
#     python/ of the checkout), and libgraphattn.so from BUILD_DIR (default build/).
# Everything but the library goes into xz archives that vllm_gpu_run.sh unpacks into /tmp.
# Downloads are kept in ~/.cache/graphattn/vllm-bundle. Fails when the result exceeds 60 MiB.
#
#   scripts/vllm_gpu_bundle.sh [OUT_DIR] [BUILD_DIR]
set -euo pipefail
. "$(dirname "$0")/env.sh"
out="${1:-$root/.vllm-carry}"
build="${2:-${BUILD_DIR:-$root/build}}"
version="$(sed -n 's/^VLLM_TORCH_2_11_VERSION = "\(.*\)"$/\1/p' "$root/python/graphattn/vllm/__init__.py")"
[ -n "$version" ] || { echo "vllm_gpu_bundle: no VLLM_TORCH_2_11_VERSION" >&2; exit 1; }
[ -f "$build/libgraphattn.so" ] || { echo "vllm_gpu_bundle: $build/libgraphattn.so not found; build first" >&2; exit 1; }
python="${PYTHON:-python3}"
cache="${XDG_CACHE_HOME:-$HOME/.cache}/graphattn/vllm-bundle"
mkdir -p "$cache"

# Distributions vLLM imports on the offline-LLM llama path beyond torch, triton and numpy.
DEPS=(
@DEPS@
)

pipdl=("$python" -m pip --disable-pip-version-check --no-input download -q --no-deps
       --only-binary=:all: --python-version 3.12 --implementation cp --abi cp312
       --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64
       --platform manylinux2014_x86_64 --platform any -d "$cache")
echo "vllm_gpu_bundle: vllm==$version and ${#DEPS[@]} dependencies (cp312) into $cache"
"${pipdl[@]}" "vllm==$version" "${DEPS[@]}"

stage="$(mktemp -d)"
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/vllm" "$stage/deps"
wheel() { ls "$cache"/"$1"-*.whl 2>/dev/null | head -1; }
# vLLM: Python files and _C_stable_libtorch only.
"$python" - "$(wheel vllm)" "$stage/vllm" <<'EOF'
import sys, zipfile
whl, dest = sys.argv[1:]
keep_so = {"vllm/_C_stable_libtorch.abi3.so"}
with zipfile.ZipFile(whl) as z:
    for n in z.namelist():
        if n.endswith(".so") and n not in keep_so:
            continue
        z.extract(n, dest)
EOF
for spec in "${DEPS[@]}"; do
  name="${spec%%==*}"
  f="$(ls "$cache"/* 2>/dev/null | grep -i "/$(echo "$name" | tr '-' '_')-${spec##*==}-" | head -1)"
  [ -n "$f" ] || { echo "vllm_gpu_bundle: no wheel for $spec in $cache" >&2; exit 1; }
  "$python" -m zipfile -e "$f" "$stage/deps"
done
# graphattn's entry point, so that vLLM's plugin loader finds it (the package is python/).
gv="$("$python" -c "import re,sys; print(re.search(r'project\(graphattn VERSION ([0-9.]+)', open(sys.argv[1]).read()).group(1))" "$root/CMakeLists.txt" 2>/dev/null || echo 0)"
mkdir -p "$stage/deps/graphattn-$gv.dist-info"
printf 'Metadata-Version: 2.1\nName: graphattn\nVersion: %s\n' "$gv" \
  > "$stage/deps/graphattn-$gv.dist-info/METADATA"
printf '[vllm.general_plugins]\ngraphattn = graphattn.vllm:register_plugin\n' \
  > "$stage/deps/graphattn-$gv.dist-info/entry_points.txt"

rm -rf "$out"
mkdir -p "$out"
tar -C "$stage/vllm" -cf - . | xz -T2 -9 > "$out/vllm.tar.xz"
tar -C "$stage/deps" -cf - . | xz -T2 -9 > "$out/deps.tar.xz"
cp "$build/libgraphattn.so" "$out/libgraphattn.so"
{
  echo "vllm $version (Python files + _C_stable_libtorch), from $(basename "$(wheel vllm)")"
  echo "deps (cp312): ${DEPS[*]}"
  echo "graphattn $gv entry point; libgraphattn.so from $build"
  du -b "$out"/* | awk '{printf "%s %.1f MiB\n", $2, $1 / 1048576}'
} > "$out/MANIFEST.txt"
cat "$out/MANIFEST.txt"
total=$(du -sb "$out" | cut -f1)
echo "vllm_gpu_bundle: $out holds $(( total / 1048576 )) MiB"
if [ "$total" -gt $(( 60 * 1048576 )) ]; then
  echo "vllm_gpu_bundle: over 60 MiB; the run tool carries at most 64 MiB with the tree" >&2
  exit 1
fi
