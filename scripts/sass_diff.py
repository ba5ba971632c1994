#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Compares the machine code (SASS) of kernel specs built from this tree's templates with the
same specs built from the templates of a base revision. Run through scripts/sass_diff.sh, which
supplies the disassembler; see there for the usage.

For every spec:
  new   the cubin that the built library compiles (graphattn-cache compile --dump-source into a
        scratch directory: the library's own renderer, NVRTC options and compile);
  base  the same rendered source with the base revision's template texts in place of the
        working tree's (the renderer only prepends the spec's constants to params.h, common.cuh
        and the family's file, so the constants part is shared), compiled by NVRTC with the
        options the source's header names, less those given with --base-drop (options that
        the working tree's renderer adds and the base revision's does not pass) and with those
        given with --base-add appended (a switch the working tree makes a default, so that the
        base compiled with it is the machine code measured with it).
Both cubins are disassembled (cuobjdump -sass, instruction encodings included, addresses
stripped) with their resource usage (registers, stack, shared memory); any difference is
reported and makes the exit status 1. Base disassemblies are kept under BUILD/sass-diff/, keyed
by the base commit and a hash of the base source and options.
"""
import argparse
import concurrent.futures
import ctypes
import difflib
import hashlib
import os
import re
import struct
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIXED_HEADER_BYTES = 8 + 4 + 4 + 16 + 4 * 4 + 8 * 4  # jit_cache/entry_format.hpp
OPTIONS_LINE = re.compile(r"^// nvrtc options:(.*)$", re.M)


def fail(msg):
    sys.stderr.write("sass_diff: " + msg + "\n")
    sys.exit(2)


def read_specs(args):
    specs = list(args.spec)
    if args.specs or not specs:
        path = args.specs or os.path.join(ROOT, "scripts", "sass_diff_specs.txt")
        with open(path) as f:
            for line in f:
                line = line.split("#", 1)[0].strip()
                if line:
                    specs.append(line)
    out = []
    for s in specs:
        if not re.search(r"_sm\d+", s):
            fail("spec '%s' has no _sm<arch> part" % s)
        for arch in args.arch:
            t = re.sub(r"_sm\d+", "_sm%d" % arch, s, count=1)
            if t not in out:
                out.append(t)
    return out


class Nvrtc:
    def __init__(self, cuda):
        path = os.path.join(cuda, "lib64", "libnvrtc.so")
        try:
            self.lib = ctypes.CDLL(path)
        except OSError as e:
            fail("cannot load %s: %s" % (path, e))
        self.lib.nvrtcGetErrorString.restype = ctypes.c_char_p

    def _check(self, rc, what):
        if rc != 0:
            raise RuntimeError("%s: %s" % (what, self.lib.nvrtcGetErrorString(rc).decode()))

    def compile(self, source, options, name):
        prog = ctypes.c_void_p()
        self._check(
            self.lib.nvrtcCreateProgram(ctypes.byref(prog), source.encode(), name.encode(), 0,
                                        None, None), "nvrtcCreateProgram")
        try:
            opts = (ctypes.c_char_p * len(options))(*[o.encode() for o in options])
            rc = self.lib.nvrtcCompileProgram(prog, len(options), opts)
            if rc != 0:
                n = ctypes.c_size_t()
                self.lib.nvrtcGetProgramLogSize(prog, ctypes.byref(n))
                log = ctypes.create_string_buffer(n.value)
                self.lib.nvrtcGetProgramLog(prog, log)
                raise RuntimeError("%s does not compile:\n%s" % (name, log.value.decode()))
            n = ctypes.c_size_t()
            self._check(self.lib.nvrtcGetCUBINSize(prog, ctypes.byref(n)), "nvrtcGetCUBINSize")
            buf = ctypes.create_string_buffer(n.value)
            self._check(self.lib.nvrtcGetCUBIN(prog, buf), "nvrtcGetCUBIN")
            return buf.raw
        finally:
            self.lib.nvrtcDestroyProgram(ctypes.byref(prog))


def disassemble(cuobjdump, cubin, workdir, name):
    path = os.path.join(workdir, name + ".cubin")
    with open(path, "wb") as f:
        f.write(cubin)
    sass = subprocess.run([cuobjdump, "-sass", path], check=True, capture_output=True,
                          text=True).stdout
    res = subprocess.run([cuobjdump, "-res-usage", path], check=True, capture_output=True,
                         text=True).stdout
    lines = []
    for line in sass.splitlines():
        if "Fatbin" in line or line.strip().startswith("code for") or not line.strip():
            continue
        line = re.sub(r"/\*[0-9a-f]{4,}\*/", "", line)  # instruction addresses
        lines.append(line.rstrip())
    for line in res.splitlines():  # registers, stack, shared and local memory per function
        if line.strip() and path not in line:
            lines.append(line.rstrip())
    return "\n".join(lines) + "\n"


def read_entries(directory):
    """spec string -> (cubin bytes, dumped source text) for every entry in `directory`."""
    out = {}
    for name in os.listdir(directory):
        if not name.endswith(".gakc"):
            continue
        with open(os.path.join(directory, name), "rb") as f:
            data = f.read()
        header_bytes = struct.unpack_from("<I", data, 12)[0]
        spec_len = struct.unpack_from("<I", data, 44)[0]
        spec = data[FIXED_HEADER_BYTES:FIXED_HEADER_BYTES + spec_len].decode()
        with open(os.path.join(directory, name[:-5] + ".cu")) as f:
            out[spec] = (data[header_bytes:], f.read())
    return out


def template_texts(rev):
    """file name -> text of templates/ in the working tree (rev None) or at `rev`."""
    out = {}
    if rev is None:
        tdir = os.path.join(ROOT, "templates")
        for name in os.listdir(tdir):
            with open(os.path.join(tdir, name), newline="") as f:
                out[name] = f.read()
        return out
    names = subprocess.run(["git", "-C", ROOT, "ls-tree", "--name-only", rev, "templates/"],
                           check=True, capture_output=True, text=True).stdout.split()
    for path in names:
        out[os.path.basename(path)] = subprocess.run(
            ["git", "-C", ROOT, "show", "%s:%s" % (rev, path)], check=True,
            capture_output=True).stdout.decode()
    return out


def split_source(source, new):
    """(prefix, family file name) of a rendered source made from the texts `new`."""
    head = new["params.h"] + "\n" + new["common.cuh"] + "\n"
    at = source.find(head)
    if at < 0:
        return None, None
    rest = source[at + len(head):]
    for name, text in new.items():
        if text == rest:
            return source[:at], name
    return None, None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--base", default="57931d5")
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--specs")
    ap.add_argument("--arch", default="80,90")
    ap.add_argument("-j", "--jobs", type=int, default=2)
    ap.add_argument("--keep")
    ap.add_argument("--base-drop", action="append", default=[])
    ap.add_argument("--base-add", action="append", default=[])
    ap.add_argument("--cuobjdump", required=True)
    ap.add_argument("spec", nargs="*")
    args = ap.parse_args()
    try:
        args.arch = [int(a) for a in args.arch.split(",") if a]
    except ValueError:
        fail("--arch '%s': expected numbers separated by commas, e.g. 80,90" % args.arch)
    if not args.arch:
        fail("--arch is empty; expected e.g. 80,90")
    if args.jobs < 1:
        fail("-j %d: expected 1 or more" % args.jobs)
    tool = os.path.join(args.build, "graphattn-cache")
    if not os.access(tool, os.X_OK):
        fail("%s is missing: build first (scripts/build.sh)" % tool)
    try:
        base_rev = subprocess.run(["git", "-C", ROOT, "rev-parse", "--verify", args.base + "^{commit}"],
                                  check=True, capture_output=True, text=True).stdout.strip()
    except subprocess.CalledProcessError:
        fail("--base '%s' is not a commit of this repository" % args.base)
    specs = read_specs(args)
    cuda = os.environ.get("CUDA_HOME", "/usr/local/cuda")
    nvrtc = Nvrtc(cuda)
    new_t, base_t = template_texts(None), template_texts(base_rev)
    cache_dir = os.path.join(args.build, "sass-diff", base_rev)
    os.makedirs(cache_dir, exist_ok=True)

    with tempfile.TemporaryDirectory(prefix="sass-diff-") as tmp:
        entries = os.path.join(tmp, "cache")
        os.mkdir(entries, 0o700)
        cmd = [tool, "--dir", entries, "compile", "--dump-source", "--threads", str(args.jobs)]
        for s in specs:
            cmd += ["--spec", s]
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode != 0:
            fail("graphattn-cache compile failed:\n" + r.stdout + r.stderr)
        built = read_entries(entries)
        missing = [s for s in specs if s not in built]
        if missing:
            fail("graphattn-cache compiled no entry for: " + ", ".join(missing))

        def one(spec):
            cubin, source = built[spec]
            prefix, family = split_source(source, new_t)
            if prefix is None:
                raise RuntimeError(
                    "the build's embedded templates differ from templates/ in the working tree; "
                    "rebuild (scripts/build.sh) and run again")
            if family not in base_t:
                raise RuntimeError("templates/%s does not exist at %s" % (family, args.base))
            options = OPTIONS_LINE.search(source).group(1).split()
            missing_drop = [o for o in args.base_drop if o not in options]
            if missing_drop:
                raise RuntimeError("--base-drop %s: the built library does not pass it for %s" %
                                   (" ".join(missing_drop), spec))
            base_options = [o for o in options if o not in args.base_drop] + args.base_add
            base_src = prefix + base_t["params.h"] + "\n" + base_t["common.cuh"] + "\n" + \
                base_t[family]
            digest = hashlib.sha256((base_src + "\0" + " ".join(base_options)).encode()).hexdigest()
            cached = os.path.join(cache_dir, "%s-%s.sass" % (spec, digest[:16]))
            if os.path.exists(cached):
                with open(cached) as f:
                    base_sass = f.read()
            else:
                base_sass = disassemble(args.cuobjdump, nvrtc.compile(base_src, base_options, spec),
                                        tmp, spec + ".base")
                with open(cached + ".tmp", "w") as f:
                    f.write(base_sass)
                os.replace(cached + ".tmp", cached)
            new_sass = disassemble(args.cuobjdump, cubin, tmp, spec + ".new")
            return spec, base_src, options, base_sass, new_sass, cubin, source

        try:
            with concurrent.futures.ThreadPoolExecutor(args.jobs) as pool:
                results = list(pool.map(one, specs))
        except (RuntimeError, subprocess.CalledProcessError) as e:
            fail(str(e) + (("\n" + e.stderr) if getattr(e, "stderr", None) else ""))

        # The two compile paths must agree: this script's NVRTC call on the library's own
        # source gives the library's cubin (checked on the first spec).
        spec0, _, options0, _, _, cubin0, source0 = results[0]
        if nvrtc.compile(source0, options0, spec0) != cubin0:
            fail("NVRTC through this script and through the library give different cubins for "
                 "%s: the comparison would not be fair" % spec0)

    differ = 0
    for spec, _, _, base_sass, new_sass, _, _ in results:
        n = base_sass.count("\n")
        if base_sass == new_sass:
            print("same     %s (%d lines)" % (spec, n))
            continue
        differ += 1
        diff = list(difflib.unified_diff(base_sass.splitlines(), new_sass.splitlines(),
                                         "base/" + spec, "new/" + spec, lineterm="", n=2))
        print("DIFFERS  %s (%d diff lines)" % (spec, len(diff)))
        if args.keep:
            os.makedirs(args.keep, exist_ok=True)
            for side, text in (("base", base_sass), ("new", new_sass)):
                with open(os.path.join(args.keep, "%s.%s.sass" % (spec, side)), "w") as f:
                    f.write(text)
        else:
            print("\n".join(diff[:40]))
    print("%d of %d specs: SASS identical to %s (%s)" %
          (len(results) - differ, len(results), args.base, base_rev[:12]))
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
