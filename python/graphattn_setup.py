"""The build step shared by python/setup.py (``pip install ./python``) and the project root's
setup.py (``pip install .``): it finds or builds libgraphattn.so and the graphattn-warmup
executable and puts them inside the package, then setuptools makes a wheel tagged
py3-none-<platform> (one wheel for every CPython 3.9+: the package is pure Python over a C ABI).

Where the library comes from, in order:
  GRAPHATTN_LIBRARY    the path of a libgraphattn.so (graphattn-warmup is taken from its
                       directory when it is there)
  GRAPHATTN_BUILD_DIR  an existing CMake build folder holding libgraphattn.so (and
                       graphattn-warmup)
  otherwise            cmake configures the source tree into $GRAPHATTN_CMAKE_BUILD_DIR
                       (default <source>/build-python) with -DGRAPHATTN_BUILD_TESTS=OFF
                       -DGRAPHATTN_BUILD_TOOLS=ON and builds graphattn_shared and
                       graphattn-warmup ($CMAKE_BUILD_PARALLEL_LEVEL jobs, default all cores;
                       the toolkit from $CUDA_HOME, default /usr/local/cuda)
"""

import os
import re
import shutil
import subprocess

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.dist import Distribution

try:  # setuptools >= 70.1 carries bdist_wheel; older ones use the wheel package's
    from setuptools.command.bdist_wheel import bdist_wheel
except ImportError:  # pragma: no cover
    from wheel.bdist_wheel import bdist_wheel

LIBRARY = "libgraphattn.so"
WARMUP = "graphattn-warmup"


def project_version(source_root):
    """The version in CMakeLists.txt's project() call, the library's own."""
    with open(os.path.join(source_root, "CMakeLists.txt"), encoding="utf-8") as f:
        m = re.search(r"project\(\s*graphattn\s+VERSION\s+([0-9.]+)", f.read())
    if not m:
        raise RuntimeError("graphattn: no 'project(graphattn VERSION x.y.z)' in "
                           "%s/CMakeLists.txt" % source_root)
    return m.group(1)


def _log(msg):
    print("graphattn build: " + msg, flush=True)


def _cmake_build(source_root):
    build_dir = os.environ.get("GRAPHATTN_CMAKE_BUILD_DIR") or os.path.join(source_root,
                                                                          "build-python")
    cuda = os.environ.get("CUDA_HOME", "/usr/local/cuda")
    cmake = shutil.which("cmake")
    if cmake is None:
        raise RuntimeError("graphattn: cmake was not found on PATH; install it (Debian: "
                           "scripts/install_deps.sh) or set GRAPHATTN_BUILD_DIR to an existing "
                           "build of graphattn or GRAPHATTN_LIBRARY to a libgraphattn.so")
    env = dict(os.environ)
    env["PATH"] = os.path.join(cuda, "bin") + os.pathsep + env.get("PATH", "")
    configure = [cmake, "-S", source_root, "-B", build_dir, "-DCMAKE_BUILD_TYPE=Release",
                 "-DGRAPHATTN_BUILD_TESTS=OFF", "-DGRAPHATTN_BUILD_TOOLS=ON",
                 "-DCUDAToolkit_ROOT=" + cuda]
    jobs = os.environ.get("CMAKE_BUILD_PARALLEL_LEVEL") or str(os.cpu_count() or 1)
    build = [cmake, "--build", build_dir, "--target", "graphattn_shared", WARMUP, "-j", jobs]
    for cmd in (configure, build):
        _log(" ".join(cmd))
        subprocess.check_call(cmd, env=env)
    return build_dir


def locate_artifacts(source_root):
    """(library path, warmup executable path or None)."""
    lib = os.environ.get("GRAPHATTN_LIBRARY")
    if lib:
        if not os.path.isfile(lib):
            raise RuntimeError("graphattn: GRAPHATTN_LIBRARY=%s is not a file" % lib)
        warmup = os.path.join(os.path.dirname(os.path.abspath(lib)), WARMUP)
        return lib, warmup if os.path.isfile(warmup) else None
    build_dir = os.environ.get("GRAPHATTN_BUILD_DIR")
    if build_dir:
        lib = os.path.join(build_dir, LIBRARY)
        if not os.path.isfile(lib):
            raise RuntimeError("graphattn: GRAPHATTN_BUILD_DIR=%s holds no %s; build the "
                               "graphattn_shared target there (cmake --build %s --target "
                               "graphattn_shared %s)" % (build_dir, LIBRARY, build_dir, WARMUP))
    else:
        build_dir = _cmake_build(source_root)
        lib = os.path.join(build_dir, LIBRARY)
        if not os.path.isfile(lib):
            raise RuntimeError("graphattn: the build in %s made no %s" % (build_dir, LIBRARY))
    warmup = os.path.join(build_dir, WARMUP)
    return lib, warmup if os.path.isfile(warmup) else None


def _build_py_class(source_root):
    class BuildPyWithLibrary(build_py):
        """build_py that also puts libgraphattn.so (and graphattn-warmup) into the package."""

        def run(self):
            super().run()
            lib, warmup = locate_artifacts(source_root)
            target = os.path.join(self.build_lib, "graphattn")
            os.makedirs(os.path.join(target, "bin"), exist_ok=True)
            _log("packaging %s" % os.path.realpath(lib))
            shutil.copyfile(lib, os.path.join(target, LIBRARY))  # follows a versioned symlink
            if warmup:
                _log("packaging %s" % warmup)
                dest = os.path.join(target, "bin", WARMUP)
                shutil.copyfile(warmup, dest)
                os.chmod(dest, 0o755)
            else:
                _log("no %s beside the library: python -m graphattn.warmup will look for it "
                     "through GRAPHATTN_BUILD_DIR / GRAPHATTN_LIBRARY at run time" % WARMUP)

    return BuildPyWithLibrary


class PlatformOnlyWheel(bdist_wheel):
    """py3-none-<platform>: the wheel holds a native library but no extension module, so it
    serves every CPython 3 on that platform."""

    def finalize_options(self):
        super().finalize_options()
        self.root_is_pure = False

    def get_tag(self):
        _, _, plat = super().get_tag()
        return "py3", "none", plat


class BinaryDistribution(Distribution):
    def has_ext_modules(self):  # platlib, not purelib
        return True


def run_setup(source_root, package_dir, build_base=None):
    options = {"build": {"build_base": build_base}} if build_base else {}
    readme = os.path.join(source_root, "python", "README.md")
    with open(readme, encoding="utf-8") as f:
        long_description = f.read()
    setup(
        name="graphattn",
        version=project_version(source_root),
        description="Paged attention for LLM inference engines: NVRTC-compiled kernels "
                    "launched inside CUDA graphs (vLLM v1 semantics), over a C ABI",
        long_description=long_description,
        long_description_content_type="text/markdown",
        python_requires=">=3.9",
        packages=["graphattn", "graphattn.vllm"],
        package_dir={"graphattn": package_dir},
        package_data={"graphattn": ["py.typed"]},
        # vLLM's plugin loader runs this in every vLLM process (graphattn/vllm/__init__.py).
        entry_points={"vllm.general_plugins": ["graphattn = graphattn.vllm:register_plugin"]},
        cmdclass={"build_py": _build_py_class(source_root), "bdist_wheel": PlatformOnlyWheel},
        distclass=BinaryDistribution,
        options=options,
        zip_safe=False,
        extras_require={"test": ["pytest", "numpy"]},
    )
