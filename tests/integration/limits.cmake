# The job at the edges of its limits, through the real `cusnap` on the simulated driver:
# descriptors running out at checkpoint and restore, durations past their range from the
# environment and the wire, carrier memory past a cgroup v1 limit, a participant lost under
# a command, sockets of reused pids, memory a restore could not bring back; the lifecycle
# fuzzer (same-user clients sending random step requests to a running job's shims), and the
# step requests to one shim that its peer's phase does not allow. Label: integration.
cusnap_add_gtest(cli_limits_test
  SOURCES
    ${CMAKE_CURRENT_LIST_DIR}/job_harness.cc
    ${CMAKE_CURRENT_LIST_DIR}/cli_job_descriptors.cc
    ${CMAKE_CURRENT_LIST_DIR}/cli_job_leases.cc
    ${CMAKE_CURRENT_LIST_DIR}/cli_job_cgroup.cc
    ${CMAKE_CURRENT_LIST_DIR}/cli_job_stale.cc
    ${CMAKE_CURRENT_LIST_DIR}/cli_job_lost.cc
    ${CMAKE_CURRENT_LIST_DIR}/lifecycle_fuzz_test.cc
    ${CMAKE_CURRENT_LIST_DIR}/lifecycle_peer_steps_test.cc
  LIBS cusnap_common cusnap_coordinator nlohmann_json::nlohmann_json
  LABELS integration
  # Restores at five descriptor limits, each with a refused identify (10 s) at 0 free, and
  # the fuzzer's rounds take minutes under AddressSanitizer on a loaded 2-core machine.
  TIMEOUT 400)
target_include_directories(cli_limits_test PRIVATE ${CMAKE_CURRENT_LIST_DIR})
add_dependencies(cli_limits_test cusnap cusnap_shim simcuda_driver job_worker)
