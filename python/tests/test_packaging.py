# SPDX-License-Identifier: Apache-2.0
"""What an installed package offers beyond the API: the console tools (graphattn-warmup,
graphattn-cache) and the library's messages through the logging module (GRAPHATTN_LOG_LEVEL).
These run against whatever `import graphattn` finds: the wheel in CI's fresh venv too."""

import os
import subprocess
import sys
import textwrap

import pytest

import graphattn
from graphattn import _tools


def run_python(code, env_update=None):
    env = dict(os.environ)
    env.update(env_update or {})
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=env,
                          capture_output=True, text=True, timeout=300)


def test_library_debug_lines_reach_logging(tmp_path):
    # A precompile with GRAPHATTN_LOG_LEVEL=debug: each kernel's line is a record of the
    # "graphattn" logger, caught here by the application's own handler.
    r = run_python("""
        import logging
        records = []

        class Catch(logging.Handler):
            def emit(self, record):
                records.append((record.name, record.levelno, record.getMessage()))

        logging.getLogger().addHandler(Catch())
        import graphattn
        cache = graphattn.KernelCache(dir=%r)
        cache.precompile(["cache_write_h128_b16_bf16_kvauto_g1_swa0_cap0_nhd_sm90"])
        for name, level, message in records:
            print(name, level, message)
        """ % str(tmp_path / "cache"), {"GRAPHATTN_LOG_LEVEL": "debug"})
    assert r.returncode == 0, r.stderr
    assert ("graphattn 10 graphattn: precompile "
            "cache_write_h128_b16_bf16_kvauto_g1_swa0_cap0_nhd_sm90: compiled in ") in r.stdout


def test_library_warnings_reach_logging(tmp_path):
    # A cache directory others can write: the library's one warning arrives as a record.
    bad = tmp_path / "open"
    bad.mkdir()
    os.chmod(bad, 0o777)
    r = run_python("""
        import logging
        logging.basicConfig(format="LOGGED %%(name)s %%(levelname)s %%(message)s")
        import graphattn
        graphattn.KernelCache(dir=%r)
        """ % str(bad), {"GRAPHATTN_LOG_LEVEL": ""})
    assert r.returncode == 0, r.stderr
    assert "LOGGED graphattn WARNING graphattn: " in r.stderr
    assert str(bad) in r.stderr


def test_log_level_off_and_bad_value(tmp_path):
    bad = tmp_path / "open"
    bad.mkdir()
    os.chmod(bad, 0o777)
    code = """
        import graphattn
        graphattn.KernelCache(dir=%r)
        """ % str(bad)
    r = run_python(code, {"GRAPHATTN_LOG_LEVEL": "off"})
    assert r.returncode == 0, r.stderr
    assert r.stderr == ""
    r = run_python(code, {"GRAPHATTN_LOG_LEVEL": "chatty"})
    assert r.returncode == 0, r.stderr
    assert ("GRAPHATTN_LOG_LEVEL 'chatty' is not a log level; supported: debug, info, warning, "
            "error or off") in r.stderr


@pytest.mark.parametrize("tool", _tools.TOOLS)
def test_console_tool_runs(tool):
    path = _tools.find_executable(tool)
    if path is None and os.environ.get("GRAPHATTN_LIBRARY"):
        pytest.skip("GRAPHATTN_LIBRARY=%s has no %s beside it" % (os.environ["GRAPHATTN_LIBRARY"],
                                                                 tool))
    assert path is not None, "an installed package ships bin/" + tool
    r = subprocess.run([sys.executable, "-c", "import sys; from graphattn import _tools; "
                        "sys.exit(_tools.run(%r))" % tool, "--version"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("%s %s (C ABI " % (tool, graphattn.__version__))
    r = subprocess.run([sys.executable, "-c", "import sys; from graphattn import _tools; "
                        "sys.exit(_tools.run(%r))" % tool, "--no-such-option"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2  # the tool's own usage error, passed through


def test_unknown_tool_is_named():
    with pytest.raises(ValueError, match="unknown tool 'graphattn-x'; the tools are"):
        _tools.run("graphattn-x", [])
