# SPDX-License-Identifier: Apache-2.0
# Sourced by the scripts beside it: the project root, the CUDA toolkit (nvcc and NVRTC: the
# binaries link libnvrtc from $cuda/lib64) and the usage check they share.
#   . "$(dirname "$0")/env.sh"
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cuda="${CUDA_HOME:-/usr/local/cuda}"
export PATH="$cuda/bin:$PATH"
export LD_LIBRARY_PATH="$cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"

# require_args GIVEN NEEDED "ARGUMENTS": exits 2 with the script's usage line when fewer than
# NEEDED arguments were given.
require_args() {
  if [ "$1" -lt "$2" ]; then
    echo "usage: $0 $3" >&2
    exit 2
  fi
}
