# Shim lifecycle and host carrier: the quiesce gate, the phase machine, the carrier over the
# simulated driver, and the whole unicast cycle across processes.

# Gate and phase machine: the shim's own sources, no driver.
cusnap_add_gtest(lifecycle_state_test
  SOURCES
    ${CMAKE_CURRENT_LIST_DIR}/lifecycle_gate_test.cc
    ${CMAKE_CURRENT_LIST_DIR}/lifecycle_state_test.cc
    ${CMAKE_SOURCE_DIR}/src/shim/lifecycle.cc
    ${CMAKE_SOURCE_DIR}/src/shim/quiesce.cc
  LIBS cusnap_common pthread
  LABELS unit lifecycle)

# The host carrier in the test process, over the simulated driver loaded with dlopen.
cusnap_add_gtest(carrier_test
  SOURCES
    ${CMAKE_CURRENT_LIST_DIR}/carrier_test.cc
    ${CMAKE_CURRENT_LIST_DIR}/carrier_sim_driver.cc
    ${CMAKE_SOURCE_DIR}/src/shim/carrier.cc
  LIBS cusnap_common dl pthread
  LABELS unit lifecycle)
add_dependencies(carrier_test simcuda_driver)
target_include_directories(carrier_test PRIVATE ${CMAKE_SOURCE_DIR}/src/simcuda/include)
