#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Checks that every C, C++ and CUDA file git tracks is formatted as the committed .clang-format
# says (clang-format from Debian 12: version 14), and that every source and script file git
# tracks carries the project's SPDX license line (LICENSE: Apache-2.0). Lists the files that do
# not and exits 1; `scripts/check_format.sh --fix` formats them in place (SPDX lines are added by
# hand).
set -euo pipefail
. "$(dirname "$0")/env.sh"
command -v clang-format >/dev/null || {
  echo "check_format: clang-format not found (scripts/install_deps.sh installs it)" >&2
  exit 2
}
cd "$root"
mapfile -t files < <(git ls-files '*.c' '*.h' '*.cpp' '*.hpp' '*.cu' '*.cuh')
if [ "${1:-}" = "--fix" ]; then
  clang-format -i "${files[@]}"
  exit 0
fi
bad=()
for f in "${files[@]}"; do
  clang-format --dry-run --Werror "$f" >/dev/null 2>&1 || bad+=("$f")
done
if [ ${#bad[@]} -gt 0 ]; then
  echo "check_format: ${#bad[@]} of ${#files[@]} files differ from .clang-format" \
       "($(clang-format --version)); run scripts/check_format.sh --fix:" >&2
  printf '  %s\n' "${bad[@]}" >&2
  exit 1
fi
echo "check_format: ${#files[@]} files formatted as .clang-format says"
mapfile -t sources < <(git ls-files '*.c' '*.h' '*.cpp' '*.hpp' '*.cu' '*.cuh' '*.py' '*.sh' \
  '*.cmake' '*CMakeLists.txt' '*.in' .ci/run)
missing=()
for f in "${sources[@]}"; do
  head -n 3 "$f" | grep -q 'SPDX-License-Identifier: Apache-2.0' || missing+=("$f")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "check_format: ${#missing[@]} of ${#sources[@]} files lack the line" \
       "'SPDX-License-Identifier: Apache-2.0' in their first 3 lines:" >&2
  printf '  %s\n' "${missing[@]}" >&2
  exit 1
fi
echo "check_format: ${#sources[@]} source files carry the SPDX license line"
