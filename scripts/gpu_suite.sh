#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The whole GPU suite on a GPU machine: every GPU test, the Python package's tests
# (scripts/python_gpu_tests.sh, libgraphattn.so from the test binary's build), graphattn-warmup
# plain and with speculative decoding (from the same directory), then
# compute-sanitizer memcheck and racecheck on the reduced matrix (GRAPHATTN_TEST_REDUCED=1).
# Logs go to OUT_DIR; the exit status is non-zero when any step fails.
#
#   scripts/gpu_suite.sh OUT_DIR [TEST_BINARY]
#
# TEST_BINARY defaults to $BUILD_DIR/graphattn-gpu-tests (BUILD_DIR defaults to build/); the C ABI's
# GPU test, graphattn-c-gpu-tests, is taken from the same directory.
# compute-sanitizer is found on PATH, else under $CUDA_HOME/bin (default /usr/local/cuda).
set -uo pipefail
. "$(dirname "$0")/env.sh"
require_args $# 1 "OUT_DIR [TEST_BINARY]"
out="$1"
bin="${2:-${BUILD_DIR:-$root/build}/graphattn-gpu-tests}"
mkdir -p "$out"
if [ ! -x "$bin" ]; then
  echo "gpu_suite: test binary $bin not found; build it first (scripts/build.sh)" >&2
  exit 2
fi
sanitizer="$(command -v compute-sanitizer || echo "$cuda/bin/compute-sanitizer")"

# GPU_SUITE_STEPS (comma-separated names, default all) runs only those steps, so the suite can
# be split over several calls of a time-limited GPU machine, e.g. GPU_SUITE_STEPS=tests,c_abi
# then the rest.
# GPU_SUITE_SHARDS (default 4) runs the C++ GPU tests as that many processes at once, each the
# test cases of some of tests/gpu/test_*.cpp (doctest's --source-file filter); their time is
# mostly the float64 references on the host, so on a 16-core H200 machine 4 shards took the
# tests from about 8 minutes to 145 s. The shards' test-case counts must add up to the
# binary's, so a test file the split misses fails the step.
wanted="${GPU_SUITE_STEPS:-tests,c_abi,python,warmup,warmup_spec,clusters,memcheck,racecheck}"
status=0
step() {  # step NAME COMMAND...: runs COMMAND, logs to OUT_DIR/NAME.log, records its time
  local name="$1"
  shift
  case ",$wanted," in *",$name,"*) ;; *) return 0 ;; esac
  local start end rc
  start=$(date +%s)
  "$@" >"$out/$name.log" 2>&1
  rc=$?
  end=$(date +%s)
  printf '%-10s rc=%d  %4ds  %s\n' "$name" "$rc" "$((end - start))" "$*" | tee -a "$out/summary.txt"
  tail -n 4 "$out/$name.log"
  [ "$rc" -eq 0 ] || status=1
}

: >"$out/summary.txt"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader \
  >"$out/device.txt" 2>&1 || true
cat "$out/device.txt"
count_cases() {  # count_cases [FILTER...]: the test cases of $bin that pass the filters
  "$bin" --count "$@" | sed -n 's/.*passing the current filters: \([0-9]*\).*/\1/p'
}
sharded_tests() {  # every C++ GPU test case, in GPU_SUITE_SHARDS processes at once
  local shards="${GPU_SUITE_SHARDS:-4}" files=() lists=() i k total sum=0 rc=0 pids=()
  for f in "$root"/tests/gpu/test_*.cpp; do files+=("*/tests/gpu/$(basename "$f")"); done
  for ((i = 0; i < ${#files[@]}; i++)); do
    k=$((i % shards))
    lists[k]="${lists[k]:+${lists[k]},}${files[i]}"
  done
  total=$(count_cases)
  for ((k = 0; k < ${#lists[@]}; k++)); do
    sum=$((sum + $(count_cases -sf="${lists[k]}")))
    "$bin" -sf="${lists[k]}" >"$out/tests-shard$k.log" 2>&1 &
    pids+=($!)
  done
  for k in "${!pids[@]}"; do
    wait "${pids[k]}" || { echo "shard $k failed (tests-shard$k.log)"; rc=1; }
    grep -E "test cases:|assertions:" "$out/tests-shard$k.log" | sed "s/^/shard $k: /"
  done
  echo "test cases: $sum in ${#lists[@]} shards, $total in the binary"
  if [ -z "$total" ] || [ "$sum" -ne "$total" ]; then
    echo "the shards miss test cases"
    rc=1
  fi
  return "$rc"
}
step tests sharded_tests
# The C ABI against the C++ API, bit for bit, and a forward captured through it (tests/c).
step c_abi "$(dirname "$bin")/graphattn-c-gpu-tests"
# The Python package over libgraphattn.so from the same build (PyTorch, CuPy and JAX tensors).
step python "$root/scripts/python_gpu_tests.sh" "$out/python" "$(dirname "$bin")"
# graphattn-warmup's continuous batching: decode steps replay decode graphs, steps with
# prefills mixed graphs (split on the device); exits 1 on any graph/eager mismatch.
step warmup env GRAPHATTN_CACHE_DIR="$out/warmup-cache" "$(dirname "$bin")/graphattn-warmup" \
  --steps 200
# graphattn-warmup with speculative decoding (uniform batches of 1 + 3 tokens a request in
# graphs, ragged and mixed steps eager): exits 1 on any graph/eager mismatch. Its own cache dir.
step warmup_spec env GRAPHATTN_CACHE_DIR="$out/warmup-cache" \
  "$(dirname "$bin")/graphattn-warmup" --spec-tokens 3 --steps 120
# The decode cluster combine is opt-in (GRAPHATTN_DECODE_CLUSTERS=1); the kernel tests cover it
# either way, this covers it through forward() and the captured layer stack.
step clusters env GRAPHATTN_DECODE_CLUSTERS=1 "$bin" --test-case='*forward*,*graph*'
if [ ! -x "$sanitizer" ] && case ",$wanted," in *,memcheck,* | *,racecheck,*) true ;; *) false ;; esac; then
  echo "gpu_suite: compute-sanitizer not found (looked on PATH and in $cuda/bin)" | tee -a "$out/summary.txt"
  exit 1
fi
# The sanitizers check every kernel launch of the reduced matrix; any report fails the step.
step memcheck env GRAPHATTN_TEST_REDUCED=1 "$sanitizer" --tool memcheck --error-exitcode 3 \
  --leak-check no "$bin"
# racecheck looks for shared-memory hazards inside kernels; the graph tests only replay kernels
# that the other tests cover and take minutes under it, so it skips them.
step racecheck env GRAPHATTN_TEST_REDUCED=1 "$sanitizer" --tool racecheck --error-exitcode 3 \
  --racecheck-report hazard "$bin" --test-case-exclude='*graph*'

echo "gpu_suite: $([ $status -eq 0 ] && echo PASS || echo FAIL) (logs in $out)" | tee -a "$out/summary.txt"
exit $status
