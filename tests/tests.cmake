# Two doctest executables: CPU tests (run everywhere) and GPU tests (skip with a message when
# no GPU is present). Each test makes its own temporary cache directory.
file(GLOB GRAPHATTN_CPU_TESTS CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/tests/test_*.cpp)
add_executable(graphattn-tests tests/main.cpp tests/reference.cpp ${GRAPHATTN_CPU_TESTS})
target_link_libraries(graphattn-tests PRIVATE graphattn doctest::doctest nlohmann_json::nlohmann_json)
target_include_directories(graphattn-tests PRIVATE ${CMAKE_SOURCE_DIR} ${XXHASH_INCLUDE_DIR})
if(GRAPHATTN_BUILD_TOOLS)
  target_compile_definitions(graphattn-tests PRIVATE
    GRAPHATTN_CACHE_TOOL="$<TARGET_FILE:graphattn-cache>"
    GRAPHATTN_WARMUP_TOOL="$<TARGET_FILE:graphattn-warmup>")
  add_dependencies(graphattn-tests graphattn-cache graphattn-warmup)
endif()
add_test(NAME cpu COMMAND graphattn-tests)

file(GLOB GRAPHATTN_GPU_TESTS CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/tests/gpu/*.cpp)
add_executable(graphattn-gpu-tests tests/gpu_main.cpp tests/reference.cpp ${GRAPHATTN_GPU_TESTS})
target_link_libraries(graphattn-gpu-tests PRIVATE graphattn doctest::doctest)
target_include_directories(graphattn-gpu-tests PRIVATE ${CMAKE_SOURCE_DIR})
add_test(NAME gpu COMMAND graphattn-gpu-tests)
set_tests_properties(gpu PROPERTIES SKIP_RETURN_CODE 77)
include(${CMAKE_CURRENT_LIST_DIR}/check_needed.cmake)
include(${CMAKE_CURRENT_LIST_DIR}/fuzz/fuzz.cmake)
