# SPDX-License-Identifier: Apache-2.0
"""The ``graphattn-warmup`` and ``graphattn-cache`` console scripts of the wheel: each runs the
native executable shipped inside the package (graphattn/bin/), passing every argument through
and replacing this Python process, so exit status, signals and output are the tool's own.

The executables are looked up in this order: the package's copy (graphattn/bin/NAME), the
directory of $GRAPHATTN_LIBRARY, $GRAPHATTN_BUILD_DIR. They find libnvrtc through their RPATH
(NVIDIA's nvidia-cuda-nvrtc wheel beside this package) or the system's loader paths; when the
package had to load libnvrtc from elsewhere by hand (a toolkit under $CUDA_HOME), that directory
is added to LD_LIBRARY_PATH for them.
"""

import os
import sys

_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))
TOOLS = ("graphattn-warmup", "graphattn-cache")


def candidates(name):
    """Where the executable `name` is looked for, in order."""
    places = [os.path.join(_PACKAGE_DIR, "bin", name)]
    lib = os.environ.get("GRAPHATTN_LIBRARY")
    if lib:
        places.append(os.path.join(os.path.dirname(os.path.abspath(lib)), name))
    build = os.environ.get("GRAPHATTN_BUILD_DIR")
    if build:
        places.append(os.path.join(os.path.abspath(build), name))
    return places


def find_executable(name):
    """The path of the tool `name`, or None."""
    for path in candidates(name):
        if os.path.isfile(path):
            if not os.access(path, os.X_OK):
                try:  # a wheel unpacked without its mode bits
                    os.chmod(path, os.stat(path).st_mode | 0o755)
                except OSError:
                    continue
            return path
    return None


def run(name, argv=None):
    """Replaces this process with the tool `name` and argv (default: sys.argv[1:]); returns 2
    with a message when the executable is missing."""
    if name not in TOOLS:
        raise ValueError("graphattn: unknown tool %r; the tools are %s" % (name, ", ".join(TOOLS)))
    argv = sys.argv[1:] if argv is None else list(argv)
    path = find_executable(name)
    if path is None:
        sys.stderr.write(
            "%s: the executable was not found; looked at:\n%s\nInstall the graphattn wheel (it "
            "ships the tools), or set GRAPHATTN_BUILD_DIR to a CMake build of graphattn (with "
            "-DGRAPHATTN_BUILD_TOOLS=ON) or GRAPHATTN_LIBRARY to a libgraphattn.so that has the "
            "tools beside it.\n" % (name, "\n".join("  " + p for p in candidates(name))))
        return 2
    env = dict(os.environ)
    from . import _lib  # loads libnvrtc by hand when the loader alone finds none

    if _lib.nvrtc_preloaded:
        extra = os.path.dirname(_lib.nvrtc_preloaded)
        env["LD_LIBRARY_PATH"] = extra + (":" + env["LD_LIBRARY_PATH"]
                                          if env.get("LD_LIBRARY_PATH") else "")
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(path, [path] + argv, env)
    return 1  # not reached


def warmup_main():
    """Console script ``graphattn-warmup``."""
    return run("graphattn-warmup")


def cache_main():
    """Console script ``graphattn-cache``."""
    return run("graphattn-cache")
