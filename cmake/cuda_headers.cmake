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

# The gated table: every driver entry point cuda.h declares that the hand-written interception
# table (src/shim/driver/entry_points.def) does not list, generated at build time from these
# headers (src/shim/driver/gen_gated_entry_points.py). Targets that include
# shim/driver/gated_entry_points.def link cusnap_gated_table.
find_package(Python3 REQUIRED COMPONENTS Interpreter)
set(CUSNAP_GATED_TABLE_DIR ${CMAKE_BINARY_DIR}/generated)
set(CUSNAP_GATED_TABLE ${CUSNAP_GATED_TABLE_DIR}/shim/driver/gated_entry_points.def)
set(_cusnap_gen ${CMAKE_SOURCE_DIR}/src/shim/driver/gen_gated_entry_points.py)
add_custom_command(OUTPUT ${CUSNAP_GATED_TABLE}
  COMMAND ${CMAKE_COMMAND} -E make_directory ${CUSNAP_GATED_TABLE_DIR}/shim/driver
  COMMAND Python3::Interpreter ${_cusnap_gen} --cxx ${CMAKE_CXX_COMPILER}
          --cuda-include ${CUSNAP_CUDA_INCLUDE_DIR}
          --table ${CMAKE_SOURCE_DIR}/src/shim/driver/entry_points.def
          --output ${CUSNAP_GATED_TABLE}
  DEPENDS ${_cusnap_gen} ${CMAKE_SOURCE_DIR}/src/shim/driver/entry_points.def
          ${CUSNAP_CUDA_INCLUDE_DIR}/cuda.h ${CUSNAP_CUDA_INCLUDE_DIR}/cudaTypedefs.h
  COMMENT "Generating the gated entry-point table from the CUDA headers"
  VERBATIM)
add_custom_target(cusnap_gated_table_gen DEPENDS ${CUSNAP_GATED_TABLE})
add_library(cusnap_gated_table INTERFACE)
target_include_directories(cusnap_gated_table INTERFACE ${CUSNAP_GATED_TABLE_DIR})
add_dependencies(cusnap_gated_table cusnap_gated_table_gen)
# Every target that sees the CUDA headers may include shim headers that include the table
# (driver_api.h): it comes with them.
target_link_libraries(cusnap_cuda_headers INTERFACE cusnap_gated_table)
