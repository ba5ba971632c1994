# SPDX-License-Identifier: Apache-2.0
# libFuzzer targets (GRAPHATTN_FUZZ=ON, clang; cmake/hardening.cmake instruments everything for
# coverage and turns on ASan + UBSan). Each target has a seed corpus in tests/fuzz/corpus/<name>
# and a ctest test, fuzz_<name>, that runs it for GRAPHATTN_FUZZ_SECONDS (default 15) from those
# seeds: the smoke run of scripts/sanitize.sh. A longer run: see tests/fuzz/README.md.
if(NOT GRAPHATTN_FUZZ)
  return()
endif()
set(GRAPHATTN_FUZZ_SECONDS 15 CACHE STRING "seconds each fuzz_* ctest test runs its target")
foreach(name spec entry size warmup_args bundle resp)
  add_executable(fuzz_${name} ${CMAKE_CURRENT_LIST_DIR}/fuzz_${name}.cpp)
  target_link_libraries(fuzz_${name} PRIVATE graphattn CLI11::CLI11)
  target_include_directories(fuzz_${name} PRIVATE ${PROJECT_SOURCE_DIR} ${XXHASH_INCLUDE_DIR})
  target_link_options(fuzz_${name} PRIVATE -fsanitize=fuzzer)
  set(_ga_found ${PROJECT_BINARY_DIR}/fuzz-corpus/${name})
  file(MAKE_DIRECTORY ${_ga_found})
  # New inputs go to the build tree's corpus; the seeds in the source tree are read only.
  add_test(NAME fuzz_${name}
           COMMAND fuzz_${name} -max_total_time=${GRAPHATTN_FUZZ_SECONDS} -timeout=10
                   -rss_limit_mb=2048 -print_final_stats=1 ${_ga_found}
                   ${CMAKE_CURRENT_LIST_DIR}/corpus/${name})
endforeach()
target_sources(fuzz_warmup_args PRIVATE ${PROJECT_SOURCE_DIR}/tools/warmup_options.cpp
                                        ${PROJECT_SOURCE_DIR}/tools/models.cpp)
