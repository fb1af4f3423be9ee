# Scale on the simulated driver (the part the CPUs allow): 8 processes on 8 simulated
# devices (SIMCUDA_DEVICE_COUNT=8, set by the fixture), through the real `cusnap` CLI and the
# CLI integration harness (job_harness.cc): all-to-all sharing, cycles in a row, a rotated
# device map, an 8-rank multicast team, phase cost against allocations, and refused checkpoints
# that leave all 8 ranks untouched. The workload kinds at 8 ranks: workload.cmake.
# Label: integration.
cusnap_add_gtest(scale_test
  SOURCES
    ${CMAKE_CURRENT_LIST_DIR}/job_harness.cc
    ${CMAKE_CURRENT_LIST_DIR}/scale_job_test.cc
    ${CMAKE_CURRENT_LIST_DIR}/scale_multicast_test.cc
    ${CMAKE_CURRENT_LIST_DIR}/scale_phase_cost_test.cc
    ${CMAKE_CURRENT_LIST_DIR}/scale_refusal_test.cc
  LIBS cusnap_common nlohmann_json::nlohmann_json
  LABELS integration
  TIMEOUT 300)
target_include_directories(scale_test PRIVATE ${CMAKE_CURRENT_LIST_DIR})
add_dependencies(scale_test cusnap cusnap_shim simcuda_driver job_worker multicast_rank)
