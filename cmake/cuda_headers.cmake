# Finds the CUDA driver API headers (cuda.h). cusnap compiles against them but never links
# libcuda or libcudart: the shim resolves the real driver at run time, and the simulated
# driver is our own libcuda.so.1.
find_path(CUSNAP_CUDA_INCLUDE_DIR cuda.h
  HINTS $ENV{CUDA_HOME}/include $ENV{CUDA_PATH}/include
  PATHS /usr/local/cuda/include /usr/local/cuda-13.0/include /usr/include
  NO_DEFAULT_PATH)
if(NOT CUSNAP_CUDA_INCLUDE_DIR)
  message(FATAL_ERROR "cuda.h not found: install the CUDA headers (/usr/local/cuda/include) or set CUDA_HOME")
endif()
file(STRINGS ${CUSNAP_CUDA_INCLUDE_DIR}/cuda.h _cusnap_cuda_version REGEX "^#define CUDA_VERSION [0-9]+")
string(REGEX MATCH "[0-9]+" CUSNAP_CUDA_HEADER_VERSION "${_cusnap_cuda_version}")
message(STATUS "cusnap: CUDA headers ${CUSNAP_CUDA_INCLUDE_DIR} (CUDA_VERSION ${CUSNAP_CUDA_HEADER_VERSION})")
add_library(cusnap_cuda_headers INTERFACE)
target_include_directories(cusnap_cuda_headers SYSTEM INTERFACE ${CUSNAP_CUDA_INCLUDE_DIR})
