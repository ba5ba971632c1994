# SPDX-License-Identifier: Apache-2.0
# Install rules (included from CMakeLists.txt when GRAPHATTN_INSTALL is ON):
#   include/graphattn/           the C++ API, graphattn.h (C ABI) and export.h
#   lib/libgraphattn.a           graphattn::graphattn
#   lib/libgraphattn.so*         graphattn::graphattn_shared
#   lib/cmake/graphattn/         graphattnConfig.cmake, its version file, the exported targets
#   lib/pkgconfig/graphattn.pc   -lgraphattn (the shared library)
#   bin/                         the tools, when they are built
include(CMakePackageConfigHelpers)

set(GRAPHATTN_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/graphattn)

install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/graphattn
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR} FILES_MATCHING PATTERN "*.h" PATTERN "*.hpp")
install(TARGETS graphattn graphattn_shared EXPORT graphattnTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
        RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(EXPORT graphattnTargets NAMESPACE graphattn:: DESTINATION ${GRAPHATTN_CMAKE_DIR})

if(GRAPHATTN_TOOLS)
  # The installed tools find libnvrtc where the build found it, as the built ones do.
  set_target_properties(${GRAPHATTN_TOOLS} PROPERTIES INSTALL_RPATH_USE_LINK_PATH ON)
  install(TARGETS ${GRAPHATTN_TOOLS} RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
endif()

configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/graphattnConfig.cmake.in
                              ${PROJECT_BINARY_DIR}/graphattnConfig.cmake
                              INSTALL_DESTINATION ${GRAPHATTN_CMAKE_DIR})
# 0.x: a minor version may break the API.
write_basic_package_version_file(${PROJECT_BINARY_DIR}/graphattnConfigVersion.cmake
                                 COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/graphattnConfig.cmake
              ${PROJECT_BINARY_DIR}/graphattnConfigVersion.cmake
        DESTINATION ${GRAPHATTN_CMAKE_DIR})

# pkg-config: relocatable (prefix from the .pc file's own place). The toolkit's include
# directory is for <cuda.h>, which the C++ headers include; Libs.private serves --static.
file(RELATIVE_PATH GRAPHATTN_PC_TO_PREFIX /${CMAKE_INSTALL_LIBDIR}/pkgconfig /)
string(REGEX REPLACE "/$" "" GRAPHATTN_PC_TO_PREFIX "${GRAPHATTN_PC_TO_PREFIX}")
set(GRAPHATTN_PC_CFLAGS)
foreach(dir ${CUDAToolkit_INCLUDE_DIRS} ${GRAPHATTN_DLPACK_INCLUDE_DIR})
  if(NOT dir IN_LIST CMAKE_C_IMPLICIT_INCLUDE_DIRECTORIES)
    string(APPEND GRAPHATTN_PC_CFLAGS " -I${dir}")
  endif()
endforeach()
get_filename_component(GRAPHATTN_NVRTC_DIR "${CUDA_nvrtc_LIBRARY}" DIRECTORY)
set(GRAPHATTN_PC_LIBS_PRIVATE "-L${GRAPHATTN_NVRTC_DIR} -lnvrtc -lstdc++ -lm")
foreach(lib ${CMAKE_DL_LIBS})
  string(APPEND GRAPHATTN_PC_LIBS_PRIVATE " -l${lib}")
endforeach()
string(APPEND GRAPHATTN_PC_LIBS_PRIVATE " -pthread")
# A program linked with the .pc's flags finds libgraphattn.so.0 where it was installed, without
# LD_LIBRARY_PATH: Libs carry -Wl,-rpath,${libdir}. A distribution installing into the loader's
# own paths (/usr/lib) turns it off.
option(GRAPHATTN_PC_RPATH "graphattn.pc: link programs with an rpath to the installed library" ON)
set(GRAPHATTN_PC_RPATH_FLAG)
if(GRAPHATTN_PC_RPATH)
  set(GRAPHATTN_PC_RPATH_FLAG " -Wl,-rpath,\${libdir}")
endif()
configure_file(${PROJECT_SOURCE_DIR}/cmake/graphattn.pc.in ${PROJECT_BINARY_DIR}/graphattn.pc
               @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/graphattn.pc
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
