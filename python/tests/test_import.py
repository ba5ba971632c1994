# SPDX-License-Identifier: Apache-2.0
"""Importing the package: no framework imported, the library found in the documented order, the
ABI checked, python -m graphattn.warmup wired to the executable. CPU only."""

import os
import subprocess
import sys
import textwrap

import pytest

import graphattn
from graphattn import warmup


def run_python(code, env_update=None, cwd=None):
    env = dict(os.environ)
    env.update(env_update or {})
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=env, cwd=cwd,
                          capture_output=True, text=True, timeout=120)


def test_import_loads_no_framework(tmp_path):
    # A torch, cupy and jax that fail when imported: the package and every module must import
    # and work on host data without touching them.
    for name in ("torch", "cupy", "jax"):
        pkg = tmp_path / name
        pkg.mkdir()
        (pkg / "__init__.py").write_text("raise ImportError('%s must not be imported')\n" % name)
    pythonpath = os.pathsep.join([str(tmp_path)] + [p for p in sys.path if p])
    r = run_python("""
        import sys
        import graphattn, graphattn.ops, graphattn.metadata, graphattn.cache, graphattn.warmup
        graphattn.metadata.split_decodes_and_prefills([0, 1, 3])
        graphattn.AttentionBackend(num_heads=8, num_kv_heads=2, head_size=64,
                                   max_model_len=256, max_num_seqs=4, arch=90)
        print(sorted(m for m in ("torch", "cupy", "jax", "numpy") if m in sys.modules))
        """, {"PYTHONPATH": pythonpath})
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "[]"


def test_library_and_versions():
    assert graphattn.ABI_VERSION == 2
    assert os.path.isfile(graphattn.library_path)
    assert graphattn.__version__.count(".") == 2
    assert isinstance(graphattn.gpu_available(), bool)


def test_devices():
    count = graphattn.device_count()
    assert count >= (1 if graphattn.gpu_available() else 0)
    with pytest.raises(graphattn.GraphattnError,
                       match="out of range" if count else "no GPU"):
        graphattn.use_device(count)


def test_library_is_the_documented_one():
    env = os.environ.get("GRAPHATTN_LIBRARY")
    if env:
        assert graphattn.library_path == os.path.abspath(env)
    else:  # an installed package loads its own copy
        assert graphattn.library_path == os.path.join(os.path.dirname(graphattn.__file__),
                                                      "libgraphattn.so")


def test_bad_graphattn_library_is_a_clear_import_error(tmp_path):
    missing = tmp_path / "nowhere" / "libgraphattn.so"
    r = run_python("import graphattn", {"GRAPHATTN_LIBRARY": str(missing)})
    assert r.returncode != 0
    assert "GRAPHATTN_LIBRARY=%s is not a file" % missing in r.stderr


def test_library_without_the_c_abi_is_refused(tmp_path):
    # Any shared object lacking graphattn_* symbols (here: libc's math library).
    import ctypes.util

    libm = ctypes.util.find_library("m")
    path = None
    for d in ("/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu", "/lib64", "/usr/lib64"):
        if libm and os.path.exists(os.path.join(d, libm)):
            path = os.path.join(d, libm)
            break
    if path is None:
        pytest.skip("no libm found to stand in for a foreign library")
    r = run_python("import graphattn", {"GRAPHATTN_LIBRARY": path})
    assert r.returncode != 0
    assert "lacks the C ABI functions graphattn_abi_version" in r.stderr


def test_warmup_executable_found_and_runs():
    path = warmup.find_executable()
    if path is None and os.environ.get("GRAPHATTN_LIBRARY"):
        pytest.skip("GRAPHATTN_LIBRARY=%s has no graphattn-warmup beside it and no "
                    "GRAPHATTN_BUILD_DIR is set" % os.environ["GRAPHATTN_LIBRARY"])
    assert path is not None, "an installed package ships bin/graphattn-warmup"
    r = subprocess.run([sys.executable, "-m", "graphattn.warmup", "--list-models"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "llama-3-8b" in r.stdout
    r = subprocess.run([sys.executable, "-m", "graphattn.warmup", "--no-such-option"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2  # the executable's own usage error, passed through


def test_warmup_absent_executable_message(monkeypatch, tmp_path, capsys):
    from graphattn import _tools

    monkeypatch.setattr(_tools, "candidates", lambda name: [str(tmp_path / name)])
    assert warmup.main(["--help"]) == 2
    err = capsys.readouterr().err
    assert "graphattn-warmup: the executable was not found" in err
    assert str(tmp_path / "graphattn-warmup") in err
    assert "GRAPHATTN_BUILD_DIR" in err


def test_warmup_candidates_follow_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("GRAPHATTN_LIBRARY", str(tmp_path / "lib" / "libgraphattn.so"))
    monkeypatch.setenv("GRAPHATTN_BUILD_DIR", str(tmp_path / "build"))
    places = warmup.candidates()
    assert places[0] == os.path.join(os.path.dirname(warmup.__file__), "bin",
                                     "graphattn-warmup")
    assert places[1:] == [str(tmp_path / "lib" / "graphattn-warmup"),
                          str(tmp_path / "build" / "graphattn-warmup")]
