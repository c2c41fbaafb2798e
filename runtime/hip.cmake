# The HIP device (runtime/hip.c): libamdhip64 through dlopen, so it links only libdl (and pthread
# for pthread_once) and needs no ROCm to build; code objects are read by kiln_codeobj (no LLVM).
# Included from the top CMakeLists.txt after compiler/; paths are relative to this file.
find_package(Threads REQUIRED)
# kiln_bundle: clang offload bundles and the AOT index (runtime/bundle.c): base and xxHash only,
# for the runtime without the compiler (kiln_rt) as much as for `kiln aot`
add_library(kiln_bundle STATIC ${CMAKE_CURRENT_LIST_DIR}/bundle.c)
target_include_directories(kiln_bundle PUBLIC ${CMAKE_CURRENT_LIST_DIR})
target_link_libraries(kiln_bundle PUBLIC kiln_base PkgConfig::XXHASH)
add_library(kiln_hip STATIC ${CMAKE_CURRENT_LIST_DIR}/hip.c ${CMAKE_CURRENT_LIST_DIR}/comgr.c)
target_include_directories(kiln_hip PUBLIC ${CMAKE_CURRENT_LIST_DIR})
target_link_libraries(kiln_hip PUBLIC kiln_base kiln_bundle kiln_codeobj ${CMAKE_DL_LIBS} Threads::Threads)
