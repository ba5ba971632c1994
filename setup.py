# SPDX-License-Identifier: Apache-2.0
# pip install . from the project root: the same package as pip install ./python (the build
# step lives in python/graphattn_setup.py). Its setuptools scratch goes to build-pip/ so that
# CMake's build/ stays CMake's.
import os
import sys

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(here, "python"))
from graphattn_setup import run_setup  # noqa: E402

run_setup(source_root=here, package_dir="python/graphattn", build_base="build-pip")
