# The ptxas check (compiler/ptxas.c): runs NVIDIA's ptxas, when present, as a subprocess on
# PTX text and reads its -v resource report.  Plain C and POSIX; no CUDA toolkit needed to
# build.  Included from the top CMakeLists.txt; paths are relative to this file.
add_library(kiln_ptxas STATIC ${CMAKE_CURRENT_LIST_DIR}/ptxas.c)
target_include_directories(kiln_ptxas PUBLIC ${CMAKE_CURRENT_LIST_DIR})
target_link_libraries(kiln_ptxas PUBLIC kiln_base)
