# The job at the edges of its limits, through the real `cusnap` on the simulated driver:
# descriptors running out at checkpoint and restore, durations past their range from the
# environment and the wire, carrier memory past a cgroup v1 limit, a participant lost under
# a command, sockets of reused pids, memory a restore could not bring back; the lifecycle
# fuzzer (same-user clients sending random step requests to a running job's shims), and the
# step requests to one shim that its peer's phase does not allow. Label: integration.
cusnap_add_job_test(cli_limits_test
  SOURCES cli_job_descriptors.cc cli_job_leases.cc cli_job_cgroup.cc cli_job_stale.cc
    cli_job_lost.cc lifecycle_fuzz_test.cc lifecycle_peer_steps_test.cc
  LIBS cusnap_coordinator
  # Restores at five descriptor limits, each with a refused identify (10 s) at 0 free, and
  # the fuzzer's rounds take minutes under AddressSanitizer on a loaded 2-core machine.
  TIMEOUT 400)
