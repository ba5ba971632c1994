# SPDX-License-Identifier: Apache-2.0
"""graphattn-kernels, the package-data wheel of prebuilt kernels:

    GRAPHATTN_BUILD_DIR=build pip wheel ./python/kernels -w dist

For every model (GRAPHATTN_KERNEL_MODELS, comma-separated; default: every built-in model of
graphattn-warmup --list-models) `graphattn-cache export` writes a bundle of its kernels for the
archs GRAPHATTN_KERNEL_ARCHS (default 80,90,100), compiling them (no GPU needed), and
`graphattn-cache import` verifies each bundle and installs it into graphattn_kernels/cache, the
directory the library finds beside it. The tools come from GRAPHATTN_BUILD_DIR (default: the
source tree's build/) and must be the ones of the graphattn this wheel serves. The wheel is
tagged py3-none-any (cubins do not depend on the host) but installs beside graphattn, in
platlib, and requires graphattn == its version and the NVRTC minor the kernels were compiled with.
"""

import os
import re
import shutil
import subprocess
import sys
import tempfile

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.dist import Distribution

try:
    from setuptools.command.bdist_wheel import bdist_wheel
except ImportError:  # pragma: no cover
    from wheel.bdist_wheel import bdist_wheel

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE_ROOT = os.path.dirname(os.path.dirname(HERE))


def build_dir():
    return os.path.abspath(os.environ.get("GRAPHATTN_BUILD_DIR")
                           or os.path.join(SOURCE_ROOT, "build"))


def tool(name):
    path = os.path.join(build_dir(), name)
    if not os.path.isfile(path):
        raise RuntimeError("graphattn-kernels: %s not found; set GRAPHATTN_BUILD_DIR to a build "
                           "of graphattn with its tools (scripts/warmup.sh makes build/)" % path)
    return path


def tool_versions():
    """(graphattn version, NVRTC (major, minor)) from graphattn-cache --version."""
    out = subprocess.run([tool("graphattn-cache"), "--version"], check=True,
                         capture_output=True, text=True).stdout
    m = re.match(r"graphattn-cache (\S+) \(.*NVRTC (\d+)\.(\d+)", out)
    if not m:
        raise RuntimeError("graphattn-kernels: cannot read graphattn-cache --version: %r" % out)
    return m.group(1), (int(m.group(2)), int(m.group(3)))


def models():
    wanted = os.environ.get("GRAPHATTN_KERNEL_MODELS")
    if wanted:
        return [m for m in wanted.split(",") if m]
    out = subprocess.run([tool("graphattn-warmup"), "--list-models"], check=True,
                         capture_output=True, text=True).stdout
    return [line.split()[0] for line in out.splitlines() if line.strip()]


def archs():
    return os.environ.get("GRAPHATTN_KERNEL_ARCHS", "80,90,100")


def log(msg):
    print("graphattn-kernels: " + msg, flush=True)


class BuildKernels(build_py):
    def run(self):
        super().run()
        cache = os.path.join(self.build_lib, "graphattn_kernels", "cache")
        shutil.rmtree(cache, ignore_errors=True)
        os.makedirs(cache, mode=0o700)
        work = tempfile.mkdtemp(prefix="graphattn-kernels-")
        try:
            compile_dir = os.path.join(work, "compiled")
            for model in models():
                bundle = os.path.join(work, model + ".tar")
                for cmd in ([tool("graphattn-cache"), "--dir", compile_dir, "export", bundle,
                             "--model", model, "--arch", archs()],
                            [tool("graphattn-cache"), "--dir", cache, "import", bundle]):
                    log(" ".join(cmd))
                    subprocess.run(cmd, check=True)
        finally:
            shutil.rmtree(work, ignore_errors=True)
        # Readable by every user of a system-wide install; writable by none but the owner (the
        # library refuses a layer that others can write).
        os.chmod(cache, 0o755)
        for name in os.listdir(cache):
            os.chmod(os.path.join(cache, name), 0o644)


class PlatlibAnyWheel(bdist_wheel):
    """py3-none-any, installed into platlib beside graphattn (where the library looks)."""

    def finalize_options(self):
        super().finalize_options()
        self.root_is_pure = False

    def get_tag(self):
        return "py3", "none", "any"


class PlatlibDistribution(Distribution):
    def has_ext_modules(self):
        return True


version, (nvrtc_major, nvrtc_minor) = tool_versions()
setup(
    name="graphattn-kernels",
    version=version,
    description="Prebuilt graphattn kernels (sm_80, sm_90, sm_100) for its built-in models, "
                "found by graphattn as a read-only cache layer",
    license="Apache-2.0",
    license_files=["LICENSE"],
    python_requires=">=3.9",
    install_requires=["graphattn==" + version,
                      "nvidia-cuda-nvrtc>=%d.%d,<%d.%d" % (nvrtc_major, nvrtc_minor, nvrtc_major,
                                                           nvrtc_minor + 1)
                      if nvrtc_major >= 13 else
                      "nvidia-cuda-nvrtc-cu12>=%d.%d,<%d.%d" % (nvrtc_major, nvrtc_minor,
                                                                nvrtc_major, nvrtc_minor + 1)],
    packages=["graphattn_kernels"],
    cmdclass={"build_py": BuildKernels, "bdist_wheel": PlatlibAnyWheel},
    distclass=PlatlibDistribution,
    zip_safe=False,
)
