# SPDX-License-Identifier: Apache-2.0
# ctest consumer_package / consumer_subdirectory: builds and runs tests/consumer against this
# build of graphattn. Any failed step fails the test with the step's output.
#
#   cmake -DMODE=package -DBUILD_DIR=<graphattn build> -DSOURCE_DIR=<graphattn source>
#         -DWORK_DIR=<scratch> [-DCUDAToolkit_ROOT=...] [-DBUILD_TYPE=Release] [-DCC=cc]
#         -P run_consumer.cmake
#     installs BUILD_DIR into WORK_DIR/prefix (cmake --install), checks the layout, builds the
#     consumer with find_package(graphattn) and runs it, then compiles the C program with
#     `pkg-config --cflags --libs graphattn` and runs it.
#   cmake -DMODE=subdirectory -DSOURCE_DIR=... -DWORK_DIR=... -P run_consumer.cmake
#     builds the consumer with add_subdirectory(SOURCE_DIR) (graphattn compiled again) and runs it.
cmake_minimum_required(VERSION 3.24)
foreach(var MODE SOURCE_DIR WORK_DIR)
  if(NOT ${var})
    message(FATAL_ERROR "run_consumer.cmake: pass -D${var}=...")
  endif()
endforeach()
if(NOT BUILD_TYPE)
  set(BUILD_TYPE Release)
endif()

function(step)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc COMMAND_ECHO STDOUT)
  if(NOT rc EQUAL 0)
    list(JOIN ARGN " " text)
    message(FATAL_ERROR "failed (${rc}): ${text}")
  endif()
endfunction()

file(REMOVE_RECURSE ${WORK_DIR})
file(MAKE_DIRECTORY ${WORK_DIR})
set(prefix ${WORK_DIR}/prefix)
set(build ${WORK_DIR}/build)
set(configure_args -S ${SOURCE_DIR}/tests/consumer -B ${build} -DCMAKE_BUILD_TYPE=${BUILD_TYPE}
                   -DGRAPHATTN_CONSUMER_MODE=${MODE})
if(CUDAToolkit_ROOT)
  list(APPEND configure_args -DCUDAToolkit_ROOT=${CUDAToolkit_ROOT})
endif()

if(MODE STREQUAL "package")
  if(NOT BUILD_DIR)
    message(FATAL_ERROR "run_consumer.cmake: MODE=package needs -DBUILD_DIR=...")
  endif()
  step(${CMAKE_COMMAND} --install ${BUILD_DIR} --prefix ${prefix} --config ${BUILD_TYPE})

  file(GLOB headers RELATIVE ${SOURCE_DIR}/include/graphattn ${SOURCE_DIR}/include/graphattn/*.h*)
  set(expected lib/libgraphattn.a lib/cmake/graphattn/graphattnConfig.cmake
      lib/cmake/graphattn/graphattnConfigVersion.cmake lib/cmake/graphattn/graphattnTargets.cmake
      lib/pkgconfig/graphattn.pc bin/graphattn-cache bin/graphattn-warmup bin/graphattn-bench
      bin/graphattn-bench-jit)
  foreach(h IN LISTS headers)
    list(APPEND expected include/graphattn/${h})
  endforeach()
  file(GLOB shared_libs ${prefix}/lib/libgraphattn.so*)
  list(LENGTH shared_libs n_shared)
  if(n_shared LESS 3)  # libgraphattn.so -> .so.0 -> .so.0.1.0
    message(FATAL_ERROR "expected libgraphattn.so, its soname link and the file: ${shared_libs}")
  endif()
  foreach(f IN LISTS expected)
    if(NOT EXISTS ${prefix}/${f})
      message(FATAL_ERROR "not installed: ${prefix}/${f}")
    endif()
  endforeach()
  # The exported targets are relocatable and name none of the build-only dependencies.
  file(GLOB target_files ${prefix}/lib/cmake/graphattn/graphattnTargets*.cmake)
  foreach(f IN LISTS target_files)
    file(READ ${f} text)
    foreach(word CLI11 nlohmann doctest xxhash ${SOURCE_DIR} ${BUILD_DIR})
      string(FIND "${text}" "${word}" at)
      if(NOT at EQUAL -1)
        message(FATAL_ERROR "${f} mentions ${word}")
      endif()
    endforeach()
  endforeach()
  list(APPEND configure_args -DCMAKE_PREFIX_PATH=${prefix})
elseif(MODE STREQUAL "subdirectory")
  list(APPEND configure_args -DGRAPHATTN_SOURCE_DIR=${SOURCE_DIR})
else()
  message(FATAL_ERROR "MODE must be package or subdirectory")
endif()

step(${CMAKE_COMMAND} ${configure_args})
step(${CMAKE_COMMAND} --build ${build} --config ${BUILD_TYPE} -j 2)
foreach(program consumer_cpp consumer_cpp_shared consumer_c)
  step(${build}/${program})
endforeach()

if(MODE STREQUAL "package")
  # pkg-config: the C program compiled and linked with nothing but the .pc file's flags, as the
  # README's command does, then run without LD_LIBRARY_PATH: the .pc's Libs carry the rpath that
  # finds libgraphattn.so.0 in the prefix.
  find_program(PKG_CONFIG pkg-config REQUIRED)
  if(NOT CC)
    set(CC cc)
  endif()
  set(ENV{PKG_CONFIG_PATH} ${prefix}/lib/pkgconfig)
  execute_process(COMMAND ${PKG_CONFIG} --modversion graphattn OUTPUT_VARIABLE version
                  OUTPUT_STRIP_TRAILING_WHITESPACE COMMAND_ERROR_IS_FATAL ANY)
  execute_process(COMMAND ${PKG_CONFIG} --cflags --libs graphattn OUTPUT_VARIABLE flags
                  OUTPUT_STRIP_TRAILING_WHITESPACE COMMAND_ERROR_IS_FATAL ANY)
  separate_arguments(flags UNIX_COMMAND "${flags}")
  set(program ${WORK_DIR}/consumer_c_pkgconfig)
  step(${CC} -std=c99 -Wall -Wextra -Werror "-DGRAPHATTN_EXPECTED_VERSION=\"${version}\""
       ${SOURCE_DIR}/tests/consumer/consumer.c ${flags} -o ${program})
  step(${CMAKE_COMMAND} -E env --unset=LD_LIBRARY_PATH ${program})
endif()
