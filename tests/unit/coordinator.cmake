# Coordinator unit tests: topology validation, the state file, the device map, and the
# checkpoint/restore sequences over fake participants and a fake native driver.
cusnap_add_gtest(coordinator_unit_test
  SOURCES
    ${CMAKE_CURRENT_LIST_DIR}/coordinator_topology_test.cc
    ${CMAKE_CURRENT_LIST_DIR}/coordinator_state_file_test.cc
    ${CMAKE_CURRENT_LIST_DIR}/coordinator_device_map_test.cc
    ${CMAKE_CURRENT_LIST_DIR}/coordinator_native_driver_test.cc
    ${CMAKE_CURRENT_LIST_DIR}/coordinator_sequence_test.cc
  LIBS cusnap_coordinator GTest::gmock
  LABELS unit coordinator)

# The `cusnap` binary run as a child process: --help, bad arguments, exit codes, inspect.
cusnap_add_gtest(cli_test
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/cli_test.cc
  LIBS cusnap_coordinator
  LABELS unit cli)
add_dependencies(cli_test cusnap)
foreach(dep cusnap_shim simcuda_driver)
  if(TARGET ${dep})
    add_dependencies(cli_test ${dep})
  endif()
endforeach()

# `cusnap` end to end over the real shim and the simulated driver, with the lifecycle
# test's peer program (tests/unit/lifecycle.cmake, defined after this file) as the job.
find_package(nlohmann_json 3 REQUIRED)
cusnap_add_gtest(cli_cycle_test
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/cli_cycle_test.cc
  LIBS nlohmann_json::nlohmann_json
  LABELS integration cli)
add_dependencies(cli_cycle_test cusnap cusnap_shim simcuda_driver lifecycle_cycle_peer)
