#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Checks that a template change leaves the machine code of existing kernel specs identical:
# renders and compiles every spec with the built library (BUILD_DIR, default build/) and with
# the templates of a base revision, disassembles both (cuobjdump -sass: encodings, control bits
# and resource usage) and prints one line per spec; exit 1 if any spec differs, 2 on bad usage.
#
#   scripts/sass_diff.sh [--base REV] [--arch 80,90] [--specs FILE] [-j N] [--keep DIR]
#                        [--base-drop OPTION]... [--base-add OPTION]... [SPEC...]
#
#   --base REV    the revision whose templates are the reference (default 57931d5)
#   --arch LIST   every spec is checked once per arch in LIST (its _smNN part replaced)
#   --specs FILE  spec strings, one a line, '#' comments; default scripts/sass_diff_specs.txt
#                 (decode: flash NHD/HND and legacy, bf16/fp16, fp8 e4m3/e5m2 KV, groups 1-16,
#                 window, soft cap, ALiBi, sinks, multi-token, block-sparse, checked mode)
#   --keep DIR    write both disassemblies of a differing spec there instead of a diff excerpt
#   --base-drop O compile the base without NVRTC option O (one the working tree's renderer added,
#                 e.g. --base-drop=-minimal: the = keeps the dash), so that a change of options is
#                 compared too; repeatable
#   --base-add O  compile the base with NVRTC option O appended (e.g. --base-add=-DGA_FP8_CVT_HW=1:
#                 a switch the working tree makes a default, so that the base is the machine code
#                 measured with it); repeatable
#   SPEC...       spec strings to check instead of the default list
#
# Needs a build (scripts/build.sh) whose embedded templates are the working tree's. The
# disassembler comes from the toolkit when it has one, else from PyPI's nvidia-cuda-cuobjdump and -nvdisasm in
# a venv under the build directory (made once). Run after every template edit:
#   scripts/build.sh && scripts/sass_diff.sh
set -euo pipefail
. "$(dirname "$0")/env.sh"
build="${BUILD_DIR:-$root/build}"
cuobjdump="$(command -v cuobjdump || true)"
if [ -z "$cuobjdump" ]; then
  venv="$build/sass-venv"
  cuobjdump="$venv/lib/python3*/site-packages/nvidia/cu13/bin/cuobjdump"
  # shellcheck disable=SC2086
  if ! ls $cuobjdump >/dev/null 2>&1; then
    echo "sass_diff: installing nvidia-cuda-cuobjdump into $venv" >&2
    python3 -m venv "$venv"
    "$venv/bin/python" -m pip --disable-pip-version-check --no-input install -q \
      "nvidia-cuda-cuobjdump==13.5.37" "nvidia-cuda-nvdisasm==13.5.37"
  fi
  # shellcheck disable=SC2086
  cuobjdump="$(ls $cuobjdump)"
  export PATH="$(dirname "$cuobjdump"):$PATH"  # cuobjdump runs nvdisasm
fi
exec python3 "$root/scripts/sass_diff.py" --build "$build" --cuobjdump "$cuobjdump" "$@"
