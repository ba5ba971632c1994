#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The sanitizer and fuzz pass (CI runs it after scripts/test.sh). Builds the library, the CPU
# tests, the tools and the libFuzzer targets with clang, AddressSanitizer and
# UndefinedBehaviorSanitizer (Debug) into ${SANITIZE_BUILD_DIR:-build-asan}; runs each fuzz target
# for GRAPHATTN_FUZZ_SECONDS (default 15) from its seed corpus (tests/fuzz/corpus) and prints its
# executions; then runs the CPU tests, the tools they drive, the C ABI's CPU tests and the NEEDED
# check under the sanitizers. Any sanitizer report fails the run.
set -euo pipefail
. "$(dirname "$0")/env.sh"
"$root/scripts/install_deps.sh" --sanitize
build="${SANITIZE_BUILD_DIR:-$root/build-asan}"
seconds="${GRAPHATTN_FUZZ_SECONDS:-15}"
cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_COMPILER=clang++ \
  -DCMAKE_C_COMPILER=clang \
  -DCUDAToolkit_ROOT="$cuda" -DGRAPHATTN_FUZZ=ON -DGRAPHATTN_FUZZ_SECONDS="$seconds" >/dev/null
fuzzers=(fuzz_spec fuzz_entry fuzz_size fuzz_warmup_args fuzz_bundle fuzz_resp)
cmake --build "$build" -j "$(nproc)" --target graphattn-tests graphattn-cache graphattn-warmup \
  graphattn-c-tests "${fuzzers[@]}"
# NVRTC is not built with the sanitizers: its own allocations at exit are not graphattn's leaks.
export LSAN_OPTIONS="suppressions=$root/tests/fuzz/lsan.supp:print_suppressions=0"
export ASAN_OPTIONS="abort_on_error=1:detect_stack_use_after_return=1:strict_string_checks=1"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
cd "$build"
ctest --output-on-failure -R '^fuzz_'
echo "fuzz smoke, ${seconds} s per target (executions, corpus units):"
for f in "${fuzzers[@]}"; do
  sed -n "/^[0-9]*\/[0-9]* Test: ${f}\$/,/^Test time/p" Testing/Temporary/LastTest.log |
    awk -v f="$f" '/stat::number_of_executed_units/ {runs=$2} /INITED|DONE/ {cov=$0}
                   END {printf "  %-18s %s runs; %s\n", f, runs, cov}'
done
# What was built here: the CPU tests (they drive the tools), the C ABI's CPU tests, the NEEDED
# check. (libgraphattn.so is not built: a sanitized shared library needs the sanitizer runtime
# from the program that loads it, which Python does not have.)
ctest --output-on-failure -R '^(cpu|c_abi|needed)$'
