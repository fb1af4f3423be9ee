# Tests of the simulated CUDA driver (src/simcuda) in one process (simcuda_add_test, in
# tests/CMakeLists.txt). Children forked here only get an environment of their own before
# their first driver call; tests of the driver across processes (sharing, teams, the
# checkpoint API on other processes): tests/integration/simcuda.cmake.
set(_simcuda_tests ${CMAKE_CURRENT_LIST_DIR})
simcuda_add_test(simcuda_resolver_test SOURCES ${_simcuda_tests}/simcuda_resolver_test.cc LABELS unit)
simcuda_add_test(simcuda_vmm_test SOURCES ${_simcuda_tests}/simcuda_vmm_test.cc LABELS unit)
simcuda_add_test(simcuda_faults_test SOURCES ${_simcuda_tests}/simcuda_faults_test.cc LABELS unit)
simcuda_add_test(simcuda_multicast_test SOURCES ${_simcuda_tests}/simcuda_multicast_test.cc LABELS unit)
simcuda_add_test(simcuda_runtime_test SOURCES ${_simcuda_tests}/simcuda_runtime_test.cc LIBS simcuda_runtime LABELS unit)
simcuda_add_test(simcuda_driver13000_test SOURCES ${_simcuda_tests}/simcuda_driver13000_test.cc OWN_MAIN LABELS unit)
simcuda_add_test(simcuda_streams_test SOURCES ${_simcuda_tests}/simcuda_streams_test.cc LABELS unit)
simcuda_add_test(simcuda_numa_attribute_test SOURCES ${_simcuda_tests}/simcuda_numa_attribute_test.cc LABELS unit)
