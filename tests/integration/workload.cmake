# The kinds of VMM use real workloads bring: NCCL's proxy-thread export of a handle
# value a peer sent back, PyTorch's retains by address, HOST_NUMA allocations, allocations
# created with no current context, cuMemGetAddressRange on tracked mappings, hundreds of
# allocations per rank; each through the real shim, `cusnap run` and `cusnap checkpoint` /
# `restore` on the simulated driver, at 2 ranks and at 8 ranks on 8 simulated devices,
# plus a restore onto a rotated device map. Label: integration.

# One rank of a ring, driven by a command language on stdin (workload_kinds_worker.cc). Linked against
# the simulated libcuda.so.1 like any CUDA program; `cusnap run` preloads the shim.
add_executable(workload_kinds_worker ${CMAKE_CURRENT_LIST_DIR}/workload_kinds_worker.cc)
cusnap_warnings(workload_kinds_worker)
target_include_directories(workload_kinds_worker PRIVATE ${CMAKE_SOURCE_DIR}/src)
target_link_libraries(workload_kinds_worker PRIVATE cusnap_common cusnap_cuda_headers simcuda_driver pthread)

cusnap_add_gtest(workload_kinds_test
  SOURCES workload_kinds_harness.cc workload_kinds_test.cc
  LIBS nlohmann_json::nlohmann_json cusnap_cuda_headers
  LABELS integration
  TIMEOUT 300)
target_include_directories(workload_kinds_test PRIVATE ${CMAKE_CURRENT_LIST_DIR})
add_dependencies(workload_kinds_test cusnap cusnap_shim simcuda_driver workload_kinds_worker)
