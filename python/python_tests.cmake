# The Python package's tests as a user meets them (scripts/python_cpu_tests.sh): a venv in the
# build folder, a real `pip install ./python` that takes libgraphattn.so and graphattn-warmup
# from this build (GRAPHATTN_BUILD_DIR, so nothing is compiled twice), then pytest; GPU tests
# skip where there is no GPU. Needs python3 with venv and network access to PyPI (numpy,
# pytest, setuptools) on its first run; later runs reuse the venv and pip's cache.
add_test(NAME python
  COMMAND bash ${PROJECT_SOURCE_DIR}/scripts/python_cpu_tests.sh ${PROJECT_BINARY_DIR})
set_tests_properties(python PROPERTIES TIMEOUT 900)

# graphattn.vllm and graphattn.torch_ops with the pinned vLLM release from PyPI (its PyTorch
# included): scripts/python_vllm_tests.sh keeps that venv in ~/.cache/graphattn between runs,
# so only a fresh machine makes it: 4.0 GB of wheels (torch 2.14 with its CUDA libraries, which
# vLLM pins), measured on the shared 2-core dev machine at 7 min to download and 16 min to
# install; later runs reuse it (the tests themselves: about 3 min).
add_test(NAME python_vllm
  COMMAND bash ${PROJECT_SOURCE_DIR}/scripts/python_vllm_tests.sh ${PROJECT_BINARY_DIR})
set_tests_properties(python_vllm PROPERTIES TIMEOUT 3600)
