# The Python package's tests as a user meets them (scripts/python_cpu_tests.sh): a venv in the
# build folder, a real `pip install ./python` that takes libgraphattn.so and graphattn-warmup
# from this build (GRAPHATTN_BUILD_DIR, so nothing is compiled twice), then pytest; GPU tests
# skip where there is no GPU. Needs python3 with venv and network access to PyPI (numpy,
# pytest, setuptools) on its first run; later runs reuse the venv and pip's cache.
add_test(NAME python
  COMMAND bash ${PROJECT_SOURCE_DIR}/scripts/python_cpu_tests.sh ${PROJECT_BINARY_DIR})
set_tests_properties(python PROPERTIES TIMEOUT 900)
