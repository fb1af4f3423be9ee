# Multicast teams, unit level: the shim's multicast table, the lifecycle's detach rules and
# the coordinator's team rules. The end-to-end tests are tests/integration/multicast.cmake.
cusnap_add_gtest(multicast_unit_test
  SOURCES multicast_table_test.cc multicast_lifecycle_test.cc
    ${CMAKE_SOURCE_DIR}/src/shim/tables/multicast_table.cc ${CUSNAP_TEST_SHIM_HANDLES}
    ${CUSNAP_TEST_SHIM_LIFECYCLE}
  LIBS cusnap_common cusnap_cuda_headers pthread
  LABELS unit)

cusnap_add_gtest(multicast_topology_test
  SOURCES multicast_topology_test.cc
  LIBS cusnap_coordinator
  LABELS unit)
