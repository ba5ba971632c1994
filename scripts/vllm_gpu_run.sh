#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# On the GPU machine (no package registry): vLLM from the folder scripts/vllm_gpu_bundle.sh
# assembled (carried as .vllm-carry), graphattn from python/ with the carried libgraphattn.so,
# then python/tests/gpu_vllm_run.py (graphattn's backend against vLLM's TRITON_ATTN; exit 0 when
# the greedy tokens match). The machine's own python3 provides PyTorch, Triton and NumPy.
# Writes OUT_DIR/vllm-run.log and OUT_DIR/vllm-run.json. With --pytest, runs pytest on the given
# python/tests files in the same environment instead (the GPU tests that import vLLM, e.g.
# test_gpu_vllm_fp8_query.py), log in OUT_DIR/vllm-pytest.log.
#
#   scripts/vllm_gpu_run.sh OUT_DIR [CARRY_DIR]      (CARRY_DIR: .vllm-carry)
#   scripts/vllm_gpu_run.sh OUT_DIR CARRY_DIR --pytest test_gpu_vllm_fp8_query.py [PYTEST ARGS]
set -uo pipefail
. "$(dirname "$0")/env.sh"
require_args $# 1 "OUT_DIR [CARRY_DIR]"
out="$1"
carry="$(cd "${2:-$root/.vllm-carry}" 2>/dev/null && pwd)" || {
  echo "vllm_gpu_run: ${2:-$root/.vllm-carry} not found; make it with scripts/vllm_gpu_bundle.sh" >&2
  exit 2
}
python="${PYTHON:-python3}"
mkdir -p "$out"
site="$(mktemp -d /tmp/graphattn-vllm-site.XXXXXX)"
start=$(date +%s)
# CARRY_DIR-c (vLLM's kernel library, carried by an earlier call on this warm machine), if there.
for archive in "$carry"/*.tar.xz "$carry"-c/*.tar.xz; do
  [ -f "$archive" ] && tar -xJf "$archive" -C "$site"
done
if [ -f "$site/vllm/_C_stable_libtorch.abi3.so" ]; then
  echo "vllm_gpu_run: vLLM's kernel library is here (from $carry-c)"
else
  # The V2 runner pins host buffers through a compiled op (a UVA view): the V1 runner then.
  export VLLM_USE_V2_MODEL_RUNNER=0
  echo "vllm_gpu_run: no vLLM kernel library ($carry-c was not carried): stand-ins, V1 runner"
fi
echo "vllm_gpu_run: unpacked $(du -sm "$site" | cut -f1) MiB into $site in $(( $(date +%s) - start )) s"
cat "$carry/MANIFEST.txt" 2>/dev/null
export PYTHONPATH="$site:$root/python${PYTHONPATH:+:$PYTHONPATH}"
# vLLM inspects model classes in a subprocess of its own: the stand-ins for its missing compiled
# modules must be there too, so every Python started with this PYTHONPATH installs them first.
cat >"$site/sitecustomize.py" <<EOF
import sys
sys.path.insert(0, "$root/python/tests")
import gpu_vllm_run
gpu_vllm_run.install_stand_ins()
EOF
export GRAPHATTN_LIBRARY="$carry/libgraphattn.so"
export GRAPHATTN_VLLM_C_SCHEMAS="$carry/vllm_C_schemas.txt"
export GRAPHATTN_CACHE_DIR="${GRAPHATTN_CACHE_DIR:-$site/graphattn-cache}"
export PYTHONUNBUFFERED=1 VLLM_ENABLE_V1_MULTIPROCESSING=0 VLLM_NO_USAGE_STATS=1 \
  VLLM_ALLOW_INSECURE_SERIALIZATION=1 \
  VLLM_DO_NOT_TRACK=1 HF_HUB_OFFLINE=1 \
  VLLM_USE_FLASHINFER_SAMPLER=0  # vLLM's own switch: its sampler otherwise imports flashinfer
"$python" -c "import sys, torch; print('python', sys.version.split()[0], 'torch', torch.__version__, 'cuda', torch.version.cuda)"
if [ "${3:-}" = "--pytest" ]; then
  cd "$root/python/tests" || exit 2
  GRAPHATTN_REQUIRE_GPU=1 "$python" -m pytest "${@:4}" -v -rs -p no:cacheprovider -p no:logging \
    2>&1 | tee "$out/vllm-pytest.log"
  exit "${PIPESTATUS[0]}"
fi
"$python" "$root/python/tests/gpu_vllm_run.py" --json "$out/vllm-run.json" "${@:3}" 2>&1 |
  tee "$out/vllm-run.log"
exit "${PIPESTATUS[0]}"
