# install.cmake — `cmake --install build --prefix P` installs kiln as a library (docs/install.md):
#   P/include/kiln.h                     the public API
#   P/lib/libkiln.so.<version>           the API and the compiler (soname libkiln.so.<major>)
#   P/lib/libkiln_rt.so.<version>        the API without the compiler (no LLVM)
#   P/lib/libkiln.a, P/lib/libkiln_rt.a  the same as self-contained archives (every kiln object)
#   P/bin/kiln                           the command line
#   P/lib/cmake/kiln/kilnConfig.cmake    find_package(kiln): kiln::kiln, kiln::kiln_rt,
#                                        kiln::kiln_static, kiln::kiln_rt_static, kiln::kiln_tool
#   P/lib/pkgconfig/kiln.pc, kiln_rt.pc  pkg-config (the shared libraries; `static_libs` for the
#                                        archives)
# The config and the .pc files locate the prefix from where they are (relocatable: a prefix can
# be moved or unpacked elsewhere).  What the archives need besides kiln is decided here once,
# from the build's own dependencies, and written into both.  Included from the top
# CMakeLists.txt after every target exists.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

# ---- what an application linking an archive needs besides it ----
# libkiln_rt.a: SQLite (the tuning database), xxHash (cache keys), pthread, libdl (the drivers
# are opened at run time), libm
set(KILN_RT_STATIC_LIBS sqlite3 xxhash pthread dl m)
# libkiln.a: the same plus LLVM and, where the AMDGPU backend links in process, lld 22's
# archives (named by path: never another lld), zlib and zstd (lld's), libstdc++ (lld is C++)
set(KILN_STATIC_LLD)
if(NOT KILN_LLVM_STATIC OR KILN_STATIC_LLD)
  set(KILN_STATIC_LLD "${KILN_LLD_ELF};${KILN_LLD_COMMON}")
endif()
if(KILN_LLVM_STATIC)
  # LLVM's component archives: the consumer's find_package(kiln) finds LLVM's own CMake package
  # (kilnConfig.cmake below), they follow lld's archives; pkg-config's static_libs does not
  # describe this build
  set(KILN_STATIC_LLVM "")
else()
  set(KILN_STATIC_LLVM "$<TARGET_FILE:LLVM>")
endif()
set(KILN_STATIC_REST ${KILN_STATIC_LLVM} z zstd stdc++ ${KILN_RT_STATIC_LIBS})
set(KILN_STATIC_LIBS ${KILN_STATIC_LLD} ${KILN_STATIC_REST})

# ---- targets ----
# the libraries' rpath: the LLVM they were linked against (Debian's libLLVM is on the loader's
# path already; another LLVM_DIR's need not be)
set_target_properties(kiln_shared kiln PROPERTIES INSTALL_RPATH_USE_LINK_PATH ON)
install(FILES ${CMAKE_SOURCE_DIR}/include/kiln.h DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(TARGETS kiln_shared kiln_rt kiln_static kiln_rt_static
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(TARGETS kiln RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})

# ---- find_package(kiln) ----
set(KILN_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/kiln)
# from P/<libdir>/cmake/kiln back to P
file(RELATIVE_PATH KILN_CONFIG_TO_PREFIX "/prefix/${KILN_CMAKE_DIR}" "/prefix")
string(JOIN " " KILN_STATIC_LIBS_CMAKE ${KILN_STATIC_LIBS})
string(JOIN " " KILN_RT_STATIC_LIBS_CMAKE ${KILN_RT_STATIC_LIBS})
# a static LLVM: the component targets kiln's compiler links, from LLVM's own package
set(KILN_LLVM_COMPONENTS)
if(KILN_LLVM_STATIC)
  set(lld_targets)
  if(KILN_STATIC_LLD)
    set(lld_targets kn_lld_common)
  endif()
  foreach(t kiln_compiler kiln_amdgpu ${lld_targets})
    get_target_property(libs ${t} INTERFACE_LINK_LIBRARIES)
    foreach(l ${libs})
      if(l MATCHES "^LLVM")
        list(APPEND KILN_LLVM_COMPONENTS ${l})
      endif()
    endforeach()
  endforeach()
  list(REMOVE_DUPLICATES KILN_LLVM_COMPONENTS)
endif()
string(JOIN " " KILN_LLVM_COMPONENTS_CMAKE ${KILN_LLVM_COMPONENTS})
configure_file(${CMAKE_CURRENT_LIST_DIR}/kilnConfig.cmake.in
               ${CMAKE_BINARY_DIR}/install/kilnConfig.cmake.in @ONLY)
file(GENERATE OUTPUT ${CMAKE_BINARY_DIR}/install/kilnConfig.cmake
     INPUT ${CMAKE_BINARY_DIR}/install/kilnConfig.cmake.in)
write_basic_package_version_file(${CMAKE_BINARY_DIR}/install/kilnConfigVersion.cmake
                                 VERSION ${PROJECT_VERSION} COMPATIBILITY SameMajorVersion)
install(FILES ${CMAKE_BINARY_DIR}/install/kilnConfig.cmake
              ${CMAKE_BINARY_DIR}/install/kilnConfigVersion.cmake
        DESTINATION ${KILN_CMAKE_DIR})

# ---- pkg-config ----
# libraries as linker arguments: names as -lNAME, files as they are
function(kiln_link_args out)
  set(args)
  foreach(l ${ARGN})
    if(l MATCHES "^(/|\\$<)")
      list(APPEND args "${l}")
    else()
      list(APPEND args "-l${l}")
    endif()
  endforeach()
  string(JOIN " " joined ${args})
  set(${out} "${joined}" PARENT_SCOPE)
endfunction()
file(RELATIVE_PATH KILN_PC_TO_PREFIX "/prefix/${CMAKE_INSTALL_LIBDIR}/pkgconfig" "/prefix")
foreach(lib kiln kiln_rt)
  if(lib STREQUAL "kiln")
    kiln_link_args(KILN_PC_PRIVATE ${KILN_STATIC_LIBS})
    set(KILN_PC_WHAT "the attention JIT: the public API with kiln's compiler (LLVM ${LLVM_PACKAGE_VERSION})")
  else()
    kiln_link_args(KILN_PC_PRIVATE ${KILN_RT_STATIC_LIBS})
    set(KILN_PC_WHAT "the attention runtime: the public API without a compiler (no LLVM)")
  endif()
  set(KILN_PC_LIB ${lib})
  configure_file(${CMAKE_CURRENT_LIST_DIR}/kiln.pc.in ${CMAKE_BINARY_DIR}/install/${lib}.pc.in @ONLY)
  file(GENERATE OUTPUT ${CMAKE_BINARY_DIR}/install/${lib}.pc
       INPUT ${CMAKE_BINARY_DIR}/install/${lib}.pc.in)
  install(FILES ${CMAKE_BINARY_DIR}/install/${lib}.pc
          DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
endforeach()
