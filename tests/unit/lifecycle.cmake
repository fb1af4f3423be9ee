# Shim lifecycle and host carrier: the quiesce gate, the phase machine, the carrier over the
# simulated driver, and the whole unicast cycle across processes.

# Gate and phase machine: the shim's own sources, no driver.
cusnap_add_gtest(lifecycle_state_test
  SOURCES
    ${CMAKE_CURRENT_LIST_DIR}/lifecycle_gate_test.cc
    ${CMAKE_CURRENT_LIST_DIR}/lifecycle_state_test.cc
    ${CMAKE_SOURCE_DIR}/src/shim/lifecycle/lifecycle.cc
    ${CMAKE_SOURCE_DIR}/src/shim/lifecycle/quiesce.cc
  LIBS cusnap_common pthread
  LABELS unit)

# The host carrier in the test process, over the simulated driver loaded with dlopen.
cusnap_add_gtest(carrier_test
  SOURCES
    ${CMAKE_CURRENT_LIST_DIR}/carrier_test.cc
    ${CMAKE_CURRENT_LIST_DIR}/carrier_sim_driver.cc
    ${CMAKE_SOURCE_DIR}/src/shim/carrier/carrier.cc
  LIBS cusnap_common dl pthread
  LABELS unit)
add_dependencies(carrier_test simcuda_driver)
target_include_directories(carrier_test PRIVATE ${CMAKE_SOURCE_DIR}/src/simcuda/include)

# The whole unicast cycle across processes: two peers (creator, importer) with the shim
# preloaded over the simulated driver, driven over their endpoints by the test.
add_executable(lifecycle_cycle_peer ${CMAKE_CURRENT_LIST_DIR}/lifecycle_cycle_peer.cc)
cusnap_warnings(lifecycle_cycle_peer)
# cusnap_common: the tickets travel over descriptor 3 in common/socket.h's packets.
target_link_libraries(lifecycle_cycle_peer PRIVATE simcuda_driver cusnap_cuda_headers cusnap_common)
cusnap_add_gtest(lifecycle_cycle_test
  SOURCES
    ${CMAKE_CURRENT_LIST_DIR}/lifecycle_cycle_test.cc
    ${CMAKE_CURRENT_LIST_DIR}/carrier_sim_driver.cc
  LIBS cusnap_common dl pthread
  LABELS integration)
add_dependencies(lifecycle_cycle_test lifecycle_cycle_peer cusnap_shim simcuda_driver)
target_include_directories(lifecycle_cycle_test PRIVATE ${CMAKE_SOURCE_DIR}/src/simcuda/include)
