# SPDX-License-Identifier: Apache-2.0
# Two doctest executables: CPU tests (run everywhere) and GPU tests (skip with a message when
# no GPU is present). Each test makes its own temporary cache directory.
file(GLOB GRAPHATTN_CPU_TESTS CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/tests/test_*.cpp)
if(NOT GRAPHATTN_BUILD_TOOLS)
  # These run the tool binaries.
  list(FILTER GRAPHATTN_CPU_TESTS EXCLUDE REGEX "/test_(cache|warmup)_tool\\.cpp$")
endif()
add_executable(graphattn-tests tests/main.cpp ${GRAPHATTN_CPU_TESTS})
target_link_libraries(graphattn-tests PRIVATE graphattn graphattn_testing doctest::doctest
                      nlohmann_json::nlohmann_json)
target_include_directories(graphattn-tests PRIVATE ${PROJECT_SOURCE_DIR} ${XXHASH_INCLUDE_DIR})
# Files the tests read (tests/data: the golden cache entry).
target_compile_definitions(graphattn-tests PRIVATE
  GRAPHATTN_TEST_DATA_DIR="${PROJECT_SOURCE_DIR}/tests/data")
if(GRAPHATTN_BUILD_TOOLS)
  target_compile_definitions(graphattn-tests PRIVATE
    GRAPHATTN_CACHE_TOOL="$<TARGET_FILE:graphattn-cache>"
    GRAPHATTN_WARMUP_TOOL="$<TARGET_FILE:graphattn-warmup>")
  add_dependencies(graphattn-tests graphattn-cache graphattn-warmup)
endif()
add_test(NAME cpu COMMAND graphattn-tests)

file(GLOB GRAPHATTN_GPU_TESTS CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/tests/gpu/*.cpp)
add_executable(graphattn-gpu-tests tests/gpu_main.cpp ${GRAPHATTN_GPU_TESTS})
target_link_libraries(graphattn-gpu-tests PRIVATE graphattn graphattn_testing doctest::doctest)
target_include_directories(graphattn-gpu-tests PRIVATE ${PROJECT_SOURCE_DIR})
add_test(NAME gpu COMMAND graphattn-gpu-tests)
set_tests_properties(gpu PROPERTIES SKIP_RETURN_CODE 77)

# libgraphattn.so exports graphattn_* and namespace graphattn only, and needs no C++ runtime.
add_test(NAME shared_exports
  COMMAND ${CMAKE_COMMAND} -DLIB=$<TARGET_FILE:graphattn_shared> -DNM=${CMAKE_NM}
          -DREADELF=${CMAKE_READELF} -P ${PROJECT_SOURCE_DIR}/tests/consumer/check_exports.cmake)

# The installed package (find_package and pkg-config) and add_subdirectory, each used by a
# separate consumer project that is configured, built and run.
get_filename_component(GRAPHATTN_CUDA_ROOT "${CUDAToolkit_BIN_DIR}" DIRECTORY)
if(GRAPHATTN_INSTALL)
  add_test(NAME consumer_package
    COMMAND ${CMAKE_COMMAND} -DMODE=package -DBUILD_DIR=${PROJECT_BINARY_DIR}
            -DSOURCE_DIR=${PROJECT_SOURCE_DIR} -DWORK_DIR=${PROJECT_BINARY_DIR}/consumer-package
            -DCC=${CMAKE_C_COMPILER} -DCUDAToolkit_ROOT=${GRAPHATTN_CUDA_ROOT}
            -DBUILD_TYPE=$<CONFIG>
            -P ${PROJECT_SOURCE_DIR}/tests/consumer/run_consumer.cmake)
endif()
add_test(NAME consumer_subdirectory
  COMMAND ${CMAKE_COMMAND} -DMODE=subdirectory -DSOURCE_DIR=${PROJECT_SOURCE_DIR}
          -DWORK_DIR=${PROJECT_BINARY_DIR}/consumer-subdirectory
          -DCUDAToolkit_ROOT=${GRAPHATTN_CUDA_ROOT} -DBUILD_TYPE=$<CONFIG>
          -P ${PROJECT_SOURCE_DIR}/tests/consumer/run_consumer.cmake)

# The C ABI (tests/c).
include(${PROJECT_SOURCE_DIR}/tests/c/c_tests.cmake)

# README.md's examples are the code the tests build and run.
find_package(Python3 COMPONENTS Interpreter REQUIRED)
add_test(NAME readme_snippets
         COMMAND ${Python3_EXECUTABLE} ${PROJECT_SOURCE_DIR}/tests/check_readme_snippets.py
                 ${PROJECT_SOURCE_DIR})

# The Python package (python/): pip install in a venv, then pytest.
include(${PROJECT_SOURCE_DIR}/python/python_tests.cmake)

# Binaries need no CUDA driver at start-up; fuzz targets (GRAPHATTN_FUZZ).
include(${PROJECT_SOURCE_DIR}/tests/check_needed.cmake)
include(${PROJECT_SOURCE_DIR}/tests/fuzz/fuzz.cmake)
