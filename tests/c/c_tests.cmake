# SPDX-License-Identifier: Apache-2.0
# The C ABI's tests, compiled as C against the static library:
#   c_abi      graphattn-c-tests: every path that needs no GPU (runs everywhere)
#   c_abi_gpu  graphattn-c-gpu-tests: forward, cache write and a captured graph through the C ABI,
#              bit for bit against the C++ API; exits 77 (ctest: Skipped) where there is no GPU
enable_language(C)

add_executable(graphattn-c-tests ${PROJECT_SOURCE_DIR}/tests/c/test_c_abi.c)
set_target_properties(graphattn-c-tests PROPERTIES C_STANDARD 11 C_STANDARD_REQUIRED ON
                                                   C_EXTENSIONS OFF)
target_compile_options(graphattn-c-tests PRIVATE -Wpedantic)
target_include_directories(graphattn-c-tests PRIVATE ${PROJECT_SOURCE_DIR})  # tests/c/c_check.h
target_compile_definitions(graphattn-c-tests PRIVATE
  GRAPHATTN_EXPECTED_VERSION="${PROJECT_VERSION}")
target_link_libraries(graphattn-c-tests PRIVATE graphattn Threads::Threads)
add_test(NAME c_abi COMMAND graphattn-c-tests)

add_executable(graphattn-c-gpu-tests ${PROJECT_SOURCE_DIR}/tests/c/test_c_abi_gpu.c
                                     ${PROJECT_SOURCE_DIR}/tests/c/readme_example.c
                                     ${PROJECT_SOURCE_DIR}/tests/c/cpp_reference_forward.cpp)
set_target_properties(graphattn-c-gpu-tests PROPERTIES C_STANDARD 11 C_STANDARD_REQUIRED ON
                                                       C_EXTENSIONS OFF)
target_compile_options(graphattn-c-gpu-tests PRIVATE $<$<COMPILE_LANGUAGE:C>:-Wpedantic>)
# The C++ helper reaches the library's dlopen'ed driver table (runtime/driver.hpp): nothing links
# libcuda, so the binary starts, and skips, where there is no driver.
target_include_directories(graphattn-c-gpu-tests PRIVATE ${PROJECT_SOURCE_DIR})
target_link_libraries(graphattn-c-gpu-tests PRIVATE graphattn)
add_test(NAME c_abi_gpu COMMAND graphattn-c-gpu-tests)
set_tests_properties(c_abi_gpu PROPERTIES SKIP_RETURN_CODE 77)
