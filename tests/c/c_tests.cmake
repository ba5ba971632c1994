# The C ABI's tests, compiled as C against the static library:
#   c_abi      graphattn-c-tests: every path that needs no GPU (runs everywhere)
#   c_abi_gpu  graphattn-c-gpu-tests: forward, cache write and a captured graph through the C ABI,
#              bit for bit against the C++ API; exits 77 (ctest: Skipped) where there is no GPU
enable_language(C)

add_executable(graphattn-c-tests ${PROJECT_SOURCE_DIR}/tests/c/test_c_abi.c)
set_target_properties(graphattn-c-tests PROPERTIES C_STANDARD 11 C_STANDARD_REQUIRED ON
                                                   C_EXTENSIONS OFF)
target_compile_options(graphattn-c-tests PRIVATE -Wpedantic)
target_compile_definitions(graphattn-c-tests PRIVATE
  GRAPHATTN_EXPECTED_VERSION="${PROJECT_VERSION}")
target_link_libraries(graphattn-c-tests PRIVATE graphattn Threads::Threads)
add_test(NAME c_abi COMMAND graphattn-c-tests)
