#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Installs what graphattn needs on Debian/Ubuntu, skipping what is already there.
# The CUDA toolkit (nvcc, NVRTC, headers) is expected under $CUDA_HOME or /usr/local/cuda.
#   (no argument)  everything scripts/test.sh builds and runs: the main job's packages, plus
#                  doctest, redis-server (started by the remote tier's tests on 127.0.0.1; its
#                  system service is disabled and stopped again), pkg-config, clang-format, venv
#   --main         only what scripts/warmup.sh builds: the library and graphattn-warmup
#   --sanitize     the test set plus clang with its sanitizer and libFuzzer runtimes
set -euo pipefail
mode="${1:-}"
case "$mode" in
  "" | --main | --sanitize) ;;
  *)
    echo "install_deps: unknown option '$mode'; supported: --main, --sanitize or none" >&2
    exit 2
    ;;
esac
need=()
have_header() { [ -e "/usr/include/$1" ]; }
# The main job: the library (xxHash, DLPack; the remote tier's Redis client is graphattn's own)
# and graphattn-warmup (CLI11, nlohmann/json).
command -v cmake >/dev/null || need+=(cmake)
command -v g++ >/dev/null || need+=(g++)
command -v make >/dev/null || need+=(make)
have_header xxhash.h || need+=(libxxhash-dev)
have_header CLI/CLI.hpp || need+=(libcli11-dev)
have_header nlohmann/json.hpp || need+=(nlohmann-json3-dev)
have_header dlpack/dlpack.h || need+=(libdlpack-dev)
new_redis=0
if [ "$mode" != "--main" ]; then
  command -v pkg-config >/dev/null || need+=(pkg-config)      # the installed package's test
  command -v clang-format >/dev/null || need+=(clang-format)  # scripts/check_format.sh
  have_header doctest/doctest.h || need+=(doctest-dev)
  # The real server the remote tier's tests start on 127.0.0.1 (never the system service); the
  # tests that create two unprivileged users need setpriv, from util-linux.
  if ! command -v redis-server >/dev/null; then
    need+=(redis-server)
    new_redis=1
  fi
  # The Python package's tests make a venv (python3 -m venv needs ensurepip: python3-venv).
  command -v python3 >/dev/null || need+=(python3)
  python3 -c "import ensurepip, venv" 2>/dev/null || need+=(python3-venv)
fi
if [ "$mode" = "--sanitize" ]; then
  command -v clang++ >/dev/null || need+=(clang)
  ls /usr/lib/llvm-*/lib/clang/*/lib/linux/libclang_rt.fuzzer-x86_64.a >/dev/null 2>&1 ||
    need+=(libclang-rt-dev)
  command -v llvm-symbolizer >/dev/null || need+=(llvm)
fi
if [ ${#need[@]} -gt 0 ]; then
  echo "installing: ${need[*]}"
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends \
    "${need[@]}" >/dev/null
  if [ "$new_redis" = 1 ]; then
    # Debian enables and starts redis-server.service on install; the tests need only the binary.
    $sudo systemctl disable redis-server.service >/dev/null 2>&1 || true
    $sudo systemctl stop redis-server.service >/dev/null 2>&1 ||
      $sudo service redis-server stop >/dev/null 2>&1 || true
  fi
fi
cuda="${CUDA_HOME:-/usr/local/cuda}"
if [ ! -e "$cuda/include/nvrtc.h" ]; then
  echo "error: the CUDA toolkit was not found at $cuda (set CUDA_HOME); graphattn needs its" \
       "NVRTC library and headers" >&2
  exit 1
fi
