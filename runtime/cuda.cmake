# The CUDA device (runtime/cuda.c): the CUDA driver API through dlopen, so it links only libdl
# (and pthread for pthread_once) and needs no CUDA toolkit to build.  Included from the top
# CMakeLists.txt; paths are relative to this file.
find_package(Threads REQUIRED)
add_library(kiln_cuda STATIC ${CMAKE_CURRENT_LIST_DIR}/cuda.c)
target_include_directories(kiln_cuda PUBLIC ${CMAKE_CURRENT_LIST_DIR})
target_link_libraries(kiln_cuda PUBLIC kiln_base ${CMAKE_DL_LIBS} Threads::Threads)
