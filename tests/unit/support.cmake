# The tests' own support code: the enum printers every suite's failures read through
# (tests/printers.h and its per-layer headers) and PhaseNamed (tests/unit/coordinator_phases.h).
cusnap_add_gtest(test_support_test
  SOURCES printers_test.cc printers_shim_test.cc coordinator_phases_test.cc
  LIBS cusnap_cuda_headers
  LABELS unit)
