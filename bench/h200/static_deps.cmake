# static_deps.cmake — injected by build_static.sh (CMAKE_PROJECT_INCLUDE, so it runs right after
# project() and before find_package(LLVM)): makes LLVM's link interface pick the static zlib and
# zstd archives instead of the shared libraries, so the binaries run on a machine that lacks them.
#
# LLVM's exported LLVMSupport names the targets ZLIB::ZLIB and zstd::libzstd_shared; LLVM's
# config only creates them when they do not exist yet, so defining them first, pointing at the
# .a files, wins.  (Debian: zlib1g-dev ships libz.a, libzstd-dev ships libzstd.a.)
foreach(pair "ZLIB::ZLIB=libz.a" "zstd::libzstd_shared=libzstd.a")
  string(REPLACE "=" ";" kv "${pair}")
  list(GET kv 0 tgt)
  list(GET kv 1 file)
  find_file(KN_STATIC_${file} ${file} PATHS /usr/lib/x86_64-linux-gnu /usr/lib64 /usr/lib
            NO_DEFAULT_PATH)
  if(KN_STATIC_${file} AND NOT TARGET ${tgt})
    add_library(${tgt} STATIC IMPORTED GLOBAL)
    set_target_properties(${tgt} PROPERTIES IMPORTED_LOCATION "${KN_STATIC_${file}}")
    message(STATUS "kiln static build: ${tgt} -> ${KN_STATIC_${file}}")
  elseif(NOT KN_STATIC_${file})
    message(WARNING "kiln static build: no ${file}; the shared library will be needed")
  endif()
endforeach()
# FindZLIB (called by LLVM's config) must agree with the target above
if(KN_STATIC_libz.a)
  set(ZLIB_LIBRARY "${KN_STATIC_libz.a}" CACHE FILEPATH "" FORCE)
endif()
