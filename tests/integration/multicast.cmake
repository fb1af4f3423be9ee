# Multicast teams end to end: multi-process jobs (multicast_rank) under `cusnap run` over the
# simulated driver, checkpointed and restored through the real `cusnap` CLI.
add_executable(multicast_rank ${CMAKE_CURRENT_LIST_DIR}/multicast_rank.cc)
cusnap_warnings(multicast_rank)
target_include_directories(multicast_rank PRIVATE ${CMAKE_SOURCE_DIR}/src/simcuda/include)
# Linked against the simulated libcuda.so.1 like any CUDA program; the shim comes first
# through LD_PRELOAD (`cusnap run`). cusnap_common: the ticket travels over descriptor 3 in
# common/socket.h's packets.
target_link_libraries(multicast_rank PRIVATE simcuda_driver cusnap_cuda_headers cusnap_common dl)

cusnap_add_gtest(multicast_cycle_test
  SOURCES multicast_cycle_test.cc
  LIBS cusnap_common
  LABELS integration)
add_dependencies(multicast_cycle_test multicast_rank cusnap cusnap_shim simcuda_driver)
