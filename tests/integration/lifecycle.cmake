# The whole unicast cycle across processes: two peers (creator, importer) with the shim
# preloaded over the simulated driver, driven over their endpoints by the test. The gate, the
# phase machine and the carrier in one process: tests/unit/lifecycle.cmake.
add_executable(lifecycle_cycle_peer ${CMAKE_CURRENT_LIST_DIR}/lifecycle_cycle_peer.cc)
cusnap_warnings(lifecycle_cycle_peer)
# cusnap_common: the tickets travel over descriptor 3 in common/socket.h's packets.
target_link_libraries(lifecycle_cycle_peer PRIVATE simcuda_driver cusnap_cuda_headers cusnap_common)
cusnap_add_gtest(lifecycle_cycle_test
  SOURCES lifecycle_cycle_test.cc ${CMAKE_SOURCE_DIR}/tests/carrier_sim_driver.cc
  LIBS cusnap_common dl pthread
  LABELS integration)
add_dependencies(lifecycle_cycle_test lifecycle_cycle_peer cusnap_shim simcuda_driver)
target_include_directories(lifecycle_cycle_test PRIVATE ${CMAKE_SOURCE_DIR}/src/simcuda/include)
