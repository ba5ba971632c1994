# SPDX-License-Identifier: Apache-2.0
# Included from the top-level CMakeLists.txt right after find_package(CUDAToolkit) and the
# project-wide compile options, before any target is defined.
#
# 1. NVRTC without the driver. FindCUDAToolkit makes CUDA::nvrtc depend on CUDA::cuda_driver, so
#    every binary linking NVRTC gets the toolkit's libcuda.so stub on its link line; it drops out
#    only where the toolchain passes --as-needed by default (Debian's gcc does; sanitizer and other
#    toolchains need not), and otherwise binaries need libcuda.so.1 at start-up. graphattn reaches
#    the driver through dlopen (runtime/driver.cpp), so the dependency is removed here;
#    tests/check_needed.cmake checks the binaries' NEEDED entries.
# 2. GRAPHATTN_SANITIZE: AddressSanitizer + UndefinedBehaviorSanitizer on everything built here
#    (any UB report aborts). Use a separate build directory, Debug (scripts/sanitize.sh).
# 3. GRAPHATTN_FUZZ (clang only): coverage instrumentation for libFuzzer on everything, and the
#    fuzz targets of tests/fuzz/fuzz.cmake.

if(TARGET CUDA::nvrtc)
  get_target_property(_ga_nvrtc_deps CUDA::nvrtc INTERFACE_LINK_LIBRARIES)
  if(_ga_nvrtc_deps)
    list(REMOVE_ITEM _ga_nvrtc_deps CUDA::cuda_driver)
    set_property(TARGET CUDA::nvrtc PROPERTY INTERFACE_LINK_LIBRARIES "${_ga_nvrtc_deps}")
  endif()
endif()

option(GRAPHATTN_SANITIZE "Build with AddressSanitizer and UndefinedBehaviorSanitizer" OFF)
option(GRAPHATTN_FUZZ "Build the libFuzzer targets (needs clang; implies the sanitizers)" OFF)

if(GRAPHATTN_FUZZ)
  if(NOT CMAKE_CXX_COMPILER_ID STREQUAL "Clang")
    message(FATAL_ERROR "GRAPHATTN_FUZZ needs clang (libFuzzer), not ${CMAKE_CXX_COMPILER_ID}: "
                        "configure with -DCMAKE_CXX_COMPILER=clang++")
  endif()
  set(GRAPHATTN_SANITIZE ON CACHE BOOL "" FORCE)
  add_compile_options(-fsanitize=fuzzer-no-link)
endif()

if(GRAPHATTN_SANITIZE)
  add_compile_options(-fsanitize=address,undefined -fno-sanitize-recover=undefined
                      -fno-omit-frame-pointer)
  add_link_options(-fsanitize=address,undefined -fno-sanitize-recover=undefined)
endif()
