# Multi-process tests of the shim's sharing core: actor processes on the simulated driver
# with the shim preloaded (tickets by SCM_RIGHTS, fork inheritance and pidfd_getfd; mutual
# imports under long calls; untracked imports; fork).
add_executable(actor_share ${CMAKE_CURRENT_LIST_DIR}/actor_share.cc)
cusnap_warnings(actor_share)
target_include_directories(actor_share PRIVATE ${CMAKE_SOURCE_DIR}/src ${CMAKE_CURRENT_LIST_DIR})
# Linked against the simulated libcuda.so.1 like any CUDA program; the shim comes first
# through LD_PRELOAD at run time.
target_link_libraries(actor_share PRIVATE cusnap_common cusnap_cuda_headers simcuda_driver pthread)

cusnap_add_gtest(sharing_multiprocess_test
  SOURCES sharing_multiprocess_test.cc
  LIBS cusnap_common cusnap_cuda_headers
  LABELS integration)
add_dependencies(sharing_multiprocess_test actor_share cusnap_shim)
