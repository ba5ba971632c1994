# SPDX-License-Identifier: Apache-2.0
# pip install ./python: builds or finds libgraphattn.so (see graphattn_setup.py for where it
# comes from) and installs the pure-Python package over its C ABI.
import os
import sys

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, here)
from graphattn_setup import run_setup  # noqa: E402

run_setup(source_root=os.path.dirname(here), package_dir="graphattn")
