#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Checks that README.md's code examples are the code the tests build and run.

A README block introduced by the line `<!-- snippet: PATH -->` must equal, line for line, the
lines of PATH (relative to the project root) between the line holding `[readme]` and the line
holding `[/readme]`. Exit 1, naming the block and the first differing line, when one does not.
"""
import pathlib
import re
import sys

root = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else ".").resolve()
readme = (root / "README.md").read_text().splitlines()


def region(path):
    lines = (root / path).read_text().splitlines()
    starts = [i for i, l in enumerate(lines) if "[readme]" in l]
    ends = [i for i, l in enumerate(lines) if "[/readme]" in l]
    if len(starts) != 1 or len(ends) != 1 or ends[0] < starts[0]:
        raise SystemExit(f"{path}: needs one [readme] ... [/readme] region")
    return lines[starts[0] + 1 : ends[0]]


failures, checked = 0, 0
for i, line in enumerate(readme):
    m = re.fullmatch(r"<!-- snippet: (\S+) -->", line.strip())
    if not m:
        continue
    if i + 1 >= len(readme) or not readme[i + 1].startswith("```"):
        raise SystemExit(f"README.md:{i + 1}: a snippet marker must precede a fenced block")
    end = next(j for j in range(i + 2, len(readme)) if readme[j].startswith("```"))
    shown, source = readme[i + 2 : end], region(m.group(1))
    checked += 1
    if shown != source:
        failures += 1
        k = next((k for k, (a, b) in enumerate(zip(shown, source)) if a != b),
                 min(len(shown), len(source)))
        print(f"README.md:{i + 3 + k}: the block differs from {m.group(1)}'s [readme] region")
        print(f"  README: {shown[k] if k < len(shown) else '<end>'}")
        print(f"  source: {source[k] if k < len(source) else '<end>'}")
if checked == 0:
    raise SystemExit("README.md has no <!-- snippet: PATH --> blocks")
print(f"{checked} README snippets checked, {failures} differ")
sys.exit(1 if failures else 0)
