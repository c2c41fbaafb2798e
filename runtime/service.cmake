# The JIT service's storage and discovery layers: the on-disk code cache (runtime/cache.c) and
# device discovery by dlopen (runtime/discover.c).  Included from the top CMakeLists.txt, so
# paths are relative to this file.  Like the rest of runtime/, it knows nothing of the IR.
pkg_check_modules(XXHASH REQUIRED IMPORTED_TARGET GLOBAL libxxhash)
find_package(Threads REQUIRED)
add_library(kiln_service STATIC
  ${CMAKE_CURRENT_LIST_DIR}/cache.c
  ${CMAKE_CURRENT_LIST_DIR}/discover.c)
target_include_directories(kiln_service PUBLIC ${CMAKE_CURRENT_LIST_DIR})
target_link_libraries(kiln_service PUBLIC kiln_arch kiln_base PkgConfig::XXHASH Threads::Threads ${CMAKE_DL_LIBS})
