#!/usr/bin/env bash
# Installs what graphattn needs to build on Debian/Ubuntu, skipping what is already there.
# The CUDA toolkit (nvcc, NVRTC, headers) is expected under $CUDA_HOME or /usr/local/cuda.
# --sanitize: also clang with its sanitizer and libFuzzer runtimes (scripts/sanitize.sh).
set -euo pipefail
need=()
if [ "${1:-}" = "--sanitize" ]; then
  command -v clang++ >/dev/null || need+=(clang)
  ls /usr/lib/llvm-*/lib/clang/*/lib/linux/libclang_rt.fuzzer-x86_64.a >/dev/null 2>&1 ||
    need+=(libclang-rt-dev)
  command -v llvm-symbolizer >/dev/null || need+=(llvm)
fi
have_header() { [ -e "/usr/include/$1" ]; }
command -v cmake >/dev/null || need+=(cmake)
command -v g++ >/dev/null || need+=(g++)
command -v pkg-config >/dev/null || need+=(pkg-config)  # the installed package's test
command -v clang-format >/dev/null || need+=(clang-format)  # scripts/check_format.sh
have_header xxhash.h || need+=(libxxhash-dev)
have_header doctest/doctest.h || need+=(doctest-dev)
have_header CLI/CLI.hpp || need+=(libcli11-dev)
have_header nlohmann/json.hpp || need+=(nlohmann-json3-dev)
have_header dlpack/dlpack.h || need+=(libdlpack-dev)
# The real Redis server that the remote kernel cache tier's tests start on 127.0.0.1 (the
# tests that create two unprivileged users need setpriv, from util-linux).
command -v redis-server >/dev/null || need+=(redis-server)
# The Python package's tests make a venv (python3 -m venv needs ensurepip: python3-venv).
command -v python3 >/dev/null || need+=(python3)
python3 -c "import ensurepip, venv" 2>/dev/null || need+=(python3-venv)
if [ ${#need[@]} -gt 0 ]; then
  echo "installing: ${need[*]}"
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${need[@]}" >/dev/null
fi
cuda="${CUDA_HOME:-/usr/local/cuda}"
if [ ! -e "$cuda/include/nvrtc.h" ]; then
  echo "error: the CUDA toolkit was not found at $cuda (set CUDA_HOME); graphattn needs its" \
       "NVRTC library and headers" >&2
  exit 1
fi
