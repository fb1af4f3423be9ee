# Shim lifecycle and host carrier, in the test process: the quiesce gate, the phase machine,
# and the carrier over the simulated driver. The whole unicast cycle across processes:
# tests/integration/lifecycle.cmake.

# Gate, phase machine and drain: the shim's own sources, no driver (the drain's is a stub).
cusnap_add_gtest(lifecycle_state_test
  SOURCES lifecycle_drain_test.cc lifecycle_gate_test.cc lifecycle_lease_watch_test.cc
    lifecycle_state_test.cc lifecycle_threads_test.cc
    ${CMAKE_SOURCE_DIR}/src/shim/lifecycle/drain.cc ${CUSNAP_TEST_SHIM_LIFECYCLE}
  LIBS cusnap_common pthread
  LABELS unit)

# The host carrier in the test process, over the simulated driver loaded with dlopen.
cusnap_add_gtest(carrier_test
  SOURCES carrier_test.cc carrier_chunks_test.cc carrier_on_disk_test.cc carrier_threads_test.cc
    host_arena_test.cc ${CMAKE_SOURCE_DIR}/tests/carrier_sim_driver.cc
    ${CMAKE_SOURCE_DIR}/src/shim/carrier/carrier.cc
    ${CMAKE_SOURCE_DIR}/src/shim/carrier/carrier_file.cc
    ${CMAKE_SOURCE_DIR}/src/shim/carrier/carrier_on_disk.cc
    ${CMAKE_SOURCE_DIR}/src/shim/carrier/carrier_stream.cc
    ${CMAKE_SOURCE_DIR}/src/shim/carrier/chunk_pinner.cc
    ${CMAKE_SOURCE_DIR}/src/shim/carrier/carrier_options.cc
    ${CMAKE_SOURCE_DIR}/src/shim/carrier/host_arena.cc
    ${CMAKE_SOURCE_DIR}/src/shim/carrier/zero_scan.cc
  LIBS cusnap_common dl pthread
  LABELS unit)
add_dependencies(carrier_test simcuda_driver)
target_include_directories(carrier_test PRIVATE ${CMAKE_SOURCE_DIR}/src/simcuda/include)

# The resource check the shim answers kCheckResources with (descriptors, cgroup v2 memory,
# RLIMIT_AS), in the test process.
cusnap_add_gtest(shim_resources_test
  SOURCES shim_resources_test.cc ${CMAKE_SOURCE_DIR}/src/shim/endpoint/resources.cc
  LIBS cusnap_common
  LABELS unit)

# The shim's GPU identity (device list by UUID, the check after a move) over a fake driver.
cusnap_add_gtest(shim_gpu_identity_test
  SOURCES shim_gpu_identity_test.cc ${CMAKE_SOURCE_DIR}/src/shim/tables/gpu_identity.cc
  LIBS cusnap_common cusnap_cuda_headers
  LABELS unit)

# The multicast rebuild steps in the test process, over the simulated driver (dlopen).
cusnap_add_gtest(multicast_steps_test
  SOURCES multicast_steps_test.cc ${CMAKE_SOURCE_DIR}/tests/carrier_sim_driver.cc
    ${CMAKE_SOURCE_DIR}/src/shim/lifecycle/multicast_steps.cc
    ${CMAKE_SOURCE_DIR}/src/shim/tables/multicast_table.cc ${CUSNAP_TEST_SHIM_SHARING}
  LIBS cusnap_common dl pthread
  LABELS unit)
add_dependencies(multicast_steps_test simcuda_driver)
target_include_directories(multicast_steps_test PRIVATE ${CMAKE_SOURCE_DIR}/src/simcuda/include)
