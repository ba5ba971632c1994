#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Assembles OUT_DIR (default .vllm-carry/, git-ignored) for scripts/vllm_gpu_run.sh on a GPU
# machine that has Python 3.12, PyTorch 2.11, Triton and NumPy but no package registry, with a
# 64 MiB limit on what travels:
#   - vLLM VLLM_TORCH_2_11_VERSION (graphattn/vllm/__init__.py: the newest release pinned to
#     PyTorch 2.11; 0.27-0.33 pin 2.13-2.14): its Python files; the op schemas of its kernel
#     library _C_stable_libtorch in vllm_C_schemas.txt (for gpu_vllm_run.py's stand-ins where
#     the library is absent);
#   - in OUT_DIR-c (a second carry, since the two together pass 64 MiB): that kernel library
#     (79 MB, 53 MiB as xz -9e; built for CUDA 13 and PyTorch 2.11's stable ABI) and
#     cumem_allocator, which the run unpacks into vLLM's folder when OUT_DIR-c was carried too
#     (the run tool keeps an earlier call's carry on a warm machine). flash-attn (458 MB) stays;
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

# Distributions vLLM imports on the offline-LLM llama path beyond torch (and its own
# dependencies), triton and numpy: `python python/tests/gpu_vllm_run.py --probe-imports` in a
# venv of torch 2.11, vllm 0.26.0 --no-deps and numpy, installing what it named until it printed
# OK (2026-11-26), then pip freeze of what that pulled in (ranges: vLLM 0.26's constraints;
# apache-tvm-ffi is xgrammar 0.2.8's, not vLLM's 0.1.10, which only flashinfer needs). Downloaded
# without dependencies (several would pull PyTorch); the machine's PyTorch brings the rest
# (ON_MACHINE is skipped if a wheel of it appears). About 34 MiB as xz.
DEPS=(
  aiohappyeyeballs==2.7.1 aiohttp==3.14.5 aiosignal==1.4.0 annotated-doc==0.0.7
  annotated-types==0.8.0 anyio==4.16.0 apache-tvm-ffi==0.1.15.post2 attrs==26.1.0 cachetools==8.0.2
  cbor2==6.3.0 certifi==2026.10.19.post1 charset-normalizer==3.5.3 click==8.5.1 cloudpickle==3.1.3
  einops==0.8.2 'fastapi>=0.133.0,<0.137.0' frozenlist==1.8.0 h11==0.16.0 hf-xet==1.8.0
  httpcore2==2.16.2 httpx2==2.16.2 huggingface_hub==2.4.0 idna==3.20 jiter==0.19.0
  'llguidance>=1.7.0,<1.8.0' markdown-it-py==4.3.0 mdurl==0.1.2 msgspec==0.22.0 multidict==7.2.1
  openai==3.57.0 openai-harmony==0.0.8 opentelemetry-api==1.45.2
  partial-json-parser==0.2.1.1.post7 pillow==13.0.0 prometheus_client==0.26.0 propcache==0.5.4
  psutil==7.2.2 py-cpuinfo==9.0.0 pybase64==1.5.1 pydantic==2.14.4 pydantic_core==2.50.5
  PyYAML==6.0.4 pyzmq==27.3.0 regex==2026.11.19 requests==2.34.2 rich==15.0.0 safetensors==0.8.0
  shellingham==1.5.4 sniffio==1.3.1 'starlette>=1.0.1' tokenizers==0.23.3 tqdm==4.70.1
  transformers==5.24.0 truststore==0.10.5 typer==0.29.2 typing-inspection==0.4.5 urllib3==2.8.0
  uvloop==0.23.0 xgrammar==0.2.8 yarl==1.25.1
)

ON_MACHINE='^(numpy|typing[-_]extensions|filelock|fsspec|jinja2|markupsafe|sympy|mpmath|networkx|setuptools|packaging|torch|triton)-'
pipdl=("$python" -m pip --disable-pip-version-check --no-input download
       --only-binary=:all: --python-version 3.12 --implementation cp --abi cp312
       --platform manylinux_2_35_x86_64 --platform manylinux_2_34_x86_64
       --platform manylinux_2_31_x86_64 --platform manylinux_2_28_x86_64
       --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64
       --platform manylinux2014_x86_64 --platform any -d "$cache")
echo "vllm_gpu_bundle: vllm==$version and ${#DEPS[@]} dependencies (cp312) into $cache"
"${pipdl[@]}" -q --no-deps "vllm==$version"
"${pipdl[@]}" --no-deps "${DEPS[@]}" > "$cache/download.log"
# The wheels of this resolution: pip names each one it saved or found already downloaded.
mapfile -t wheels < <(sed -n 's/^ *\(Saved\|File was already downloaded\) \(.*\.whl\)$/\2/p' \
  "$cache/download.log" | sort -u)

stage="$(mktemp -d)"
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/vllm" "$stage/deps"
wheel() { ls "$cache"/"$1"-"$version"-*.whl 2>/dev/null | head -1; }
# vLLM: Python files and _C_stable_libtorch only.
"$python" - "$(wheel vllm)" "$stage/vllm" <<'EOF'
import sys, zipfile
whl, dest = sys.argv[1:]
# the kernel library (read for its op schemas) and cumem_allocator: both go to OUT_DIR-c
keep_so = {"vllm/_C_stable_libtorch.abi3.so", "vllm/cumem_allocator.abi3.so"}
with zipfile.ZipFile(whl) as z:
    for n in z.namelist():
        if n.endswith(".so") and n not in keep_so:
            continue
        z.extract(n, dest)
EOF
packed=()
for f in "${wheels[@]}"; do
  base="$(basename "$f")"
  if echo "$base" | grep -qiE "$ON_MACHINE"; then continue; fi
  "$python" -m zipfile -e "$f" "$stage/deps"
  packed+=("$(echo "$base" | cut -d- -f1-2)")
done
echo "vllm_gpu_bundle: ${#packed[@]} wheels unpacked"
# graphattn's entry point, so that vLLM's plugin loader finds it (the package is python/).
gv="$("$python" -c "import re,sys; print(re.search(r'project\(graphattn VERSION ([0-9.]+)', open(sys.argv[1]).read()).group(1))" "$root/CMakeLists.txt" 2>/dev/null || echo 0)"
mkdir -p "$stage/deps/graphattn-$gv.dist-info"
printf 'Metadata-Version: 2.1\nName: graphattn\nVersion: %s\n' "$gv" \
  > "$stage/deps/graphattn-$gv.dist-info/METADATA"
printf '[vllm.general_plugins]\ngraphattn = graphattn.vllm:register_plugin\n' \
  > "$stage/deps/graphattn-$gv.dist-info/entry_points.txt"

rm -rf "$out" "$out-c"
mkdir -p "$out" "$out-c"
# vLLM's kernel library, for the second carry.
mkdir -p "$stage/vllm_c/vllm"
cp "$stage/vllm/vllm/_C_stable_libtorch.abi3.so" "$stage/vllm_c/vllm/"
mv "$stage/vllm/vllm/cumem_allocator.abi3.so" "$stage/vllm_c/vllm/"
tar -C "$stage/vllm_c" -cf - . | xz -T2 -9e > "$out-c/vllm_C.tar.xz"
# The schemas of vLLM's kernel library (the .so itself stays here): gpu_vllm_run.py defines
# those ops so that vLLM's Python, which names some of them at import, loads without it.
"$python" "$root/scripts/vllm_op_schemas.py" "$stage/vllm/vllm/_C_stable_libtorch.abi3.so" \
  "$out/vllm_C_schemas.txt"
rm "$stage/vllm/vllm/_C_stable_libtorch.abi3.so"
tar -C "$stage/vllm" -cf - . | xz -T2 -6 > "$out/vllm.tar.xz"
tar -C "$stage/deps" -cf - . | xz -T2 -6 > "$out/deps.tar.xz"
cp "$build/libgraphattn.so" "$out/libgraphattn.so"
{
  echo "vllm $version (Python files; op schemas of _C_stable_libtorch), from $(basename "$(wheel vllm)")"
  echo "deps (cp312 wheels): ${packed[*]}"
  echo "graphattn $gv entry point; libgraphattn.so from $build"
  du -b "$out"/* | awk '{printf "%s %.1f MiB\n", $2, $1 / 1048576}'
} > "$out/MANIFEST.txt"
cat "$out/MANIFEST.txt"
total=$(du -sb "$out" | cut -f1)
echo "vllm_gpu_bundle: $out holds $(( total / 1048576 )) MiB"
c_total=$(du -sb "$out-c" | cut -f1)
echo "vllm_gpu_bundle: $out-c holds $(( c_total / 1048576 )) MiB (carry it in a call of its own)"
if [ "$total" -gt $(( 60 * 1048576 )) ] || [ "$c_total" -gt $(( 60 * 1048576 )) ]; then
  echo "vllm_gpu_bundle: over 60 MiB; the run tool carries at most 64 MiB with the tree" >&2
  exit 1
fi
