# SPDX-License-Identifier: Apache-2.0
"""``python -m graphattn.warmup [args]``: runs the graphattn-warmup executable (the engine
start-up job for a built-in model: compile every kernel, capture the decode graphs, run a decode
loop), passing every argument through (``--help`` lists them). The wheel also installs it as the
``graphattn-warmup`` command; graphattn._tools says where the executable is looked for.
"""

import sys

from . import _tools

EXECUTABLE = "graphattn-warmup"


def candidates():
    """Where the executable is looked for, in order."""
    return _tools.candidates(EXECUTABLE)


def find_executable():
    """The path of graphattn-warmup, or None."""
    return _tools.find_executable(EXECUTABLE)


def main(argv=None):
    return _tools.run(EXECUTABLE, argv)


if __name__ == "__main__":
    sys.exit(main())
