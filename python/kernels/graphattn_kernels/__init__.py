# SPDX-License-Identifier: Apache-2.0
"""graphattn-kernels: prebuilt graphattn kernels (cubins for sm_80, sm_90 and sm_100) for the
built-in models, as package data, like FlashInfer's cubin wheel.

Nothing needs configuring: libgraphattn.so and the graphattn tools look for
site-packages/graphattn_kernels/cache beside their own package (graphattn::package_kernel_dirs())
and search it as a read-only cache layer after the kernel cache's own directories, so an engine's
first start loads these kernels instead of compiling them. An entry is used only when its key
matches exactly: the same graphattn templates (this wheel's version is graphattn's) and the same
NVRTC major.minor (this wheel pins NVIDIA's NVRTC wheel to it); anything else compiles as before.
"""

import os

CACHE_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "cache")


def cache_dir():
    """The directory of prebuilt cache entries (a graphattn cache layer)."""
    return CACHE_DIR
