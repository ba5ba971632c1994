"""``python -m graphattn.warmup [args]``: runs the graphattn-warmup executable (the engine
start-up job for a built-in model: compile every kernel, capture the decode graphs, run a decode
loop), passing every argument through (``--help`` lists them).

The executable is looked up in this order: the copy installed inside this package
(graphattn/bin/graphattn-warmup), the directory of $GRAPHATTN_LIBRARY, $GRAPHATTN_BUILD_DIR.
"""

import os
import sys

EXECUTABLE = "graphattn-warmup"
_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))


def candidates():
    """Where the executable is looked for, in order."""
    places = [os.path.join(_PACKAGE_DIR, "bin", EXECUTABLE)]
    lib = os.environ.get("GRAPHATTN_LIBRARY")
    if lib:
        places.append(os.path.join(os.path.dirname(os.path.abspath(lib)), EXECUTABLE))
    build = os.environ.get("GRAPHATTN_BUILD_DIR")
    if build:
        places.append(os.path.join(os.path.abspath(build), EXECUTABLE))
    return places


def find_executable():
    """The path of graphattn-warmup, or None."""
    for path in candidates():
        if os.path.isfile(path):
            if not os.access(path, os.X_OK):
                try:  # a wheel unpacked without its mode bits
                    os.chmod(path, os.stat(path).st_mode | 0o755)
                except OSError:
                    continue
            return path
    return None


def main(argv=None):
    argv = sys.argv[1:] if argv is None else list(argv)
    path = find_executable()
    if path is None:
        sys.stderr.write(
            "graphattn.warmup: the graphattn-warmup executable was not found; looked at:\n%s\n"
            "Install the package with pip (it builds and ships the executable), or set "
            "GRAPHATTN_BUILD_DIR to a CMake build of graphattn (with "
            "-DGRAPHATTN_BUILD_TOOLS=ON) or GRAPHATTN_LIBRARY to a libgraphattn.so that has the "
            "executable beside it.\n" % "\n".join("  " + p for p in candidates()))
        return 2
    env = dict(os.environ)
    from . import _lib  # the package found libnvrtc by hand: let the executable find it too

    if _lib.nvrtc_preloaded:
        extra = os.path.dirname(_lib.nvrtc_preloaded)
        env["LD_LIBRARY_PATH"] = extra + (":" + env["LD_LIBRARY_PATH"]
                                          if env.get("LD_LIBRARY_PATH") else "")
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(path, [path] + argv, env)


if __name__ == "__main__":
    sys.exit(main())
