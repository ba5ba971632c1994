# SPDX-License-Identifier: Apache-2.0
# ctest shared_exports: cmake -DLIB=libgraphattn.so -DNM=nm -DREADELF=readelf -P check_exports.cmake
#
# Fails, listing the offenders, when libgraphattn.so
# - exports a symbol that is neither a graphattn_* C function nor C++ in namespace graphattn
#   (functions _ZN9graphattn / _ZNK9graphattn, typeinfo _ZTIN9graphattn, typeinfo names
#   _ZTSN9graphattn, vtables _ZTVN9graphattn): std:: instantiations or the static libstdc++;
# - misses a symbol that every build must export (so an all-hidden build fails too);
# - needs libstdc++ or the CUDA driver at load time (libgcc_s, the unwinder, is shared on
#   purpose: see CMakeLists.txt).
cmake_minimum_required(VERSION 3.24)
foreach(var LIB NM READELF)
  if(NOT ${var})
    message(FATAL_ERROR "check_exports.cmake: pass -D${var}=...")
  endif()
endforeach()

execute_process(COMMAND ${NM} -D --defined-only ${LIB} OUTPUT_VARIABLE nm_out
                COMMAND_ERROR_IS_FATAL ANY)
string(REPLACE "\n" ";" lines "${nm_out}")
set(symbols)
set(bad)
foreach(line IN LISTS lines)
  # "<address> <type> <name>"
  if(line MATCHES "^[0-9a-fA-F]* *[A-Za-z] (.+)$")
    set(sym "${CMAKE_MATCH_1}")
    list(APPEND symbols "${sym}")
    if(NOT sym MATCHES "^(graphattn_|_ZN9graphattn|_ZNK9graphattn|_ZT[ISV]N9graphattn)")
      list(APPEND bad "${sym}")
    endif()
  endif()
endforeach()

# A few that the C and C++ faces need: the C ABI, a free function, a class member, the
# exception type a C++ caller catches (typeinfo and vtable).
set(required
    graphattn_abi_version
    graphattn_layer_config_check
    _ZN9graphattn13AttentionSpec5parseERKNSt7__cxx1112basic_stringIcSt11char_traitsIcESaIcEEE
    _ZNK9graphattn13AttentionSpec8validateEv
    _ZN9graphattn11KernelCacheC1ENS_12CacheOptionsE
    _ZTIN9graphattn5ErrorE
    _ZTIN9graphattn12CompileErrorE)
set(missing)
foreach(sym IN LISTS required)
  if(NOT sym IN_LIST symbols)
    list(APPEND missing "${sym}")
  endif()
endforeach()

execute_process(COMMAND ${READELF} -d ${LIB} OUTPUT_VARIABLE dyn COMMAND_ERROR_IS_FATAL ANY)
string(REGEX MATCHALL "Shared library: \\[[^]]+\\]" needed "${dyn}")
set(bad_needed)
foreach(n IN LISTS needed)
  if(n MATCHES "libstdc\\+\\+|libcuda\\.")
    list(APPEND bad_needed "${n}")
  endif()
endforeach()

list(LENGTH symbols n_symbols)
set(report "")
if(bad)
  list(LENGTH bad n)
  list(JOIN bad "\n  " text)
  string(APPEND report "${n} exported symbols outside graphattn:\n  ${text}\n")
endif()
if(missing)
  list(JOIN missing "\n  " text)
  string(APPEND report "missing exports:\n  ${text}\n")
endif()
if(bad_needed)
  list(JOIN bad_needed "\n  " text)
  string(APPEND report "unwanted DT_NEEDED entries:\n  ${text}\n")
endif()
if(report)
  message(FATAL_ERROR "${LIB}:\n${report}")
endif()
message(STATUS "${LIB}: ${n_symbols} exported symbols, all graphattn's; needs: ${needed}")
