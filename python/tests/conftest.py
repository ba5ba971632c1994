# SPDX-License-Identifier: Apache-2.0
"""Shared fixtures. The package under test is whatever `import graphattn` finds: the installed
one (scripts/test.sh's venv), or python/ on PYTHONPATH with GRAPHATTN_LIBRARY set
(scripts/python_gpu_tests.sh).

Every test run gets its own kernel cache directory (GRAPHATTN_CACHE_DIR, set before the library
is first used), so nothing is read from or written to ~/.cache/graphattn.

GPU tests skip with a message where there is no GPU or no PyTorch; GRAPHATTN_REQUIRE_GPU=1 (set
by scripts/python_gpu_tests.sh) turns those skips into failures, so a GPU run cannot pass
without running them.
"""

import os
import random
import tempfile

import pytest

_CACHE_ROOT = tempfile.mkdtemp(prefix="graphattn-pytest-")
os.environ["GRAPHATTN_CACHE_DIR"] = os.path.join(_CACHE_ROOT, "default-cache")

import graphattn  # noqa: E402  (after GRAPHATTN_CACHE_DIR)
from graphattn import _dlpack  # noqa: E402


def pytest_report_header(config):
    return ["graphattn %s from %s, library %s, GPU available: %s, test seed %d"
            % (graphattn.__version__, os.path.dirname(graphattn.__file__),
               graphattn.library_path, graphattn.gpu_available(), TEST_SEED)]


TEST_SEED = int(os.environ.get("GRAPHATTN_TEST_SEED") or random.SystemRandom().randrange(2**31))


@pytest.fixture
def seed(request):
    """A per-test seed derived from GRAPHATTN_TEST_SEED (or a random one), printed so that a
    failure can be repeated."""
    value = (TEST_SEED * 1000003 + sum(map(ord, request.node.name))) % 2**31
    print("seed %d (GRAPHATTN_TEST_SEED=%d)" % (value, TEST_SEED))
    return value


def skip_or_fail(reason):
    if os.environ.get("GRAPHATTN_REQUIRE_GPU") == "1":
        pytest.fail("GRAPHATTN_REQUIRE_GPU=1 but " + reason, pytrace=False)
    pytest.skip(reason, allow_module_level=True)


def require_torch_gpu():
    """Returns torch, or skips (fails under GRAPHATTN_REQUIRE_GPU=1) the calling module."""
    try:
        import torch
    except ImportError:
        skip_or_fail("PyTorch is not installed (the GPU tests use it for data and references)")
    if not torch.cuda.is_available():
        skip_or_fail("no CUDA GPU visible to PyTorch")
    torch.cuda.init()
    if not graphattn.gpu_available():
        skip_or_fail("PyTorch sees a GPU but graphattn does not (driver?)")
    return torch


def fake_cuda(shape, dtype=(_dlpack.FLOAT, 16, 1), address=1 << 32):
    """A DLTensor that claims CUDA memory at an address nobody dereferences, for checks that
    fail before any launch (an unprepared backend, a call refused by its argument checks), so
    it is never read."""
    return _dlpack.make_dltensor(address, (_dlpack.CUDA, 0), dtype, shape,
                                 _dlpack.compact_strides(shape))
