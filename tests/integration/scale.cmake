# Scale on the simulated driver (the part the CPUs allow): 8 processes on 8 simulated
# devices (SIMCUDA_DEVICE_COUNT=8, set by the fixture), through the real `cusnap` CLI and the
# CLI integration harness (job_harness.cc): all-to-all sharing, cycles in a row, a rotated
# device map, an 8-rank multicast team, phase cost against allocations, and refused checkpoints
# that leave all 8 ranks untouched. The workload kinds at 8 ranks: workload.cmake.
# Label: integration.
cusnap_add_job_test(scale_test
  SOURCES scale_job_test.cc scale_multicast_test.cc scale_phase_cost_test.cc
    scale_refusal_test.cc
  DEPENDS multicast_rank
  TIMEOUT 300)
