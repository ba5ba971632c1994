# SPDX-License-Identifier: Apache-2.0
"""The README's example (python/examples/cuda_graph_decode.py) runs and checks itself."""

import os
import runpy

from conftest import require_torch_gpu

torch = require_torch_gpu()

EXAMPLES = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples")


def test_cuda_graph_decode_example(capsys):
    runpy.run_path(os.path.join(EXAMPLES, "cuda_graph_decode.py"), run_name="__main__")
    assert "replayed 3 batches" in capsys.readouterr().out
