# Multicast teams, unit level: the shim's multicast table, the lifecycle's detach rules and
# the coordinator's team rules. The end-to-end tests are tests/integration/multicast.cmake.
cusnap_add_gtest(multicast_unit_test
  SOURCES
    ${CMAKE_CURRENT_LIST_DIR}/multicast_table_test.cc
    ${CMAKE_CURRENT_LIST_DIR}/multicast_lifecycle_test.cc
    ${CMAKE_SOURCE_DIR}/src/shim/tables/multicast_table.cc
    ${CMAKE_SOURCE_DIR}/src/shim/tables/capabilities.cc
    ${CMAKE_SOURCE_DIR}/src/shim/tables/handles.cc
    ${CMAKE_SOURCE_DIR}/src/shim/lifecycle/lifecycle.cc
    ${CMAKE_SOURCE_DIR}/src/shim/lifecycle/lease_watch.cc
    ${CMAKE_SOURCE_DIR}/src/shim/hold/hold_again.cc
    ${CMAKE_SOURCE_DIR}/src/shim/hold/hold_guard.cc
    ${CMAKE_SOURCE_DIR}/src/shim/lifecycle/quiesce.cc
  LIBS cusnap_common cusnap_cuda_headers pthread
  LABELS unit)

cusnap_add_gtest(multicast_topology_test
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/multicast_topology_test.cc
  LIBS cusnap_coordinator
  LABELS unit)
