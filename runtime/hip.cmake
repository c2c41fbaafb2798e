# The HIP device (runtime/hip.c): libamdhip64 through dlopen, so it links only libdl (and pthread
# for pthread_once) and needs no ROCm to build; code objects are read by kiln_codeobj (no LLVM).
# Included from the top CMakeLists.txt after compiler/; paths are relative to this file.
find_package(Threads REQUIRED)
add_library(kiln_hip STATIC ${CMAKE_CURRENT_LIST_DIR}/hip.c)
target_include_directories(kiln_hip PUBLIC ${CMAKE_CURRENT_LIST_DIR})
target_link_libraries(kiln_hip PUBLIC kiln_base kiln_codeobj ${CMAKE_DL_LIBS} Threads::Threads)
