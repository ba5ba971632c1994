# SPDX-License-Identifier: Apache-2.0
# The binaries must start where there is no CUDA driver: NVRTC is linked, libcuda is opened with
# dlopen at run time (README). This test reads every built binary's NEEDED entries with readelf
# and fails if one names libcuda. Included from tests/tests.cmake.
find_program(GRAPHATTN_READELF NAMES readelf)
if(GRAPHATTN_READELF)
  set(_ga_needed_bins)
  foreach(t graphattn-tests graphattn-gpu-tests graphattn-cache graphattn-warmup graphattn-bench
            graphattn-bench-jit graphattn_shared graphattn-c-tests graphattn-c-gpu-tests)
    if(TARGET ${t})
      get_target_property(_ga_type ${t} TYPE)
      if(_ga_type STREQUAL "EXECUTABLE" OR _ga_type STREQUAL "SHARED_LIBRARY")
        list(APPEND _ga_needed_bins "$<TARGET_FILE:${t}>")
      endif()
    endif()
  endforeach()
  add_test(NAME needed
           COMMAND ${CMAKE_COMMAND} -DREADELF=${GRAPHATTN_READELF} "-DFILES=${_ga_needed_bins}"
                   -P ${CMAKE_CURRENT_LIST_DIR}/check_needed_run.cmake)
endif()
