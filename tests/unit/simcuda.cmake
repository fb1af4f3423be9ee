# Tests of the simulated CUDA driver (src/simcuda). Test programs link the built libcuda.so.1
# (and libcudart.so.13) directly; their RPATH points into ${CUSNAP_SIMCUDA_DIR}. They find
# the driver's path with dladdr and set SIMCUDA_* variables themselves (simcuda_test_util.h),
# so they need nothing from the test environment but the sanitizer options.

# simcuda_add_test(<name> SOURCES <files...> [LIBS <libs...>] [OWN_MAIN])
# OWN_MAIN: the program has its own main() (to set driver variables before any test runs).
function(simcuda_add_test name)
  cmake_parse_arguments(ARG "OWN_MAIN" "" "SOURCES;LIBS" ${ARGN})
  add_executable(${name} ${ARG_SOURCES})
  cusnap_warnings(${name})
  set(main GTest::gtest_main)
  if(ARG_OWN_MAIN)
    set(main "")
  endif()
  # cusnap_common: descriptor passing between test processes (simcuda_test_util.h).
  target_link_libraries(${name} PRIVATE GTest::gtest GTest::gmock ${main} simcuda_driver cusnap_cuda_headers cusnap_common
    dl pthread ${ARG_LIBS})
  target_include_directories(${name} PRIVATE ${CMAKE_CURRENT_FUNCTION_LIST_DIR} ${CMAKE_SOURCE_DIR}/src)
  # The environment travels through the launcher, as in cusnap_add_gtest (CMake 3.25 keeps only
  # the first entry of a list-valued ENVIRONMENT property of discovered tests).
  set_target_properties(${name} PROPERTIES CROSSCOMPILING_EMULATOR "env;${CUSNAP_TEST_ENV}")
  gtest_discover_tests(${name} DISCOVERY_MODE PRE_TEST PROPERTIES TIMEOUT 120 LABELS simcuda)
endfunction()

set(_simcuda_tests ${CMAKE_CURRENT_LIST_DIR})
simcuda_add_test(simcuda_resolver_test SOURCES ${_simcuda_tests}/simcuda_resolver_test.cc)
simcuda_add_test(simcuda_vmm_test SOURCES ${_simcuda_tests}/simcuda_vmm_test.cc)
simcuda_add_test(simcuda_checkpoint_test SOURCES ${_simcuda_tests}/simcuda_checkpoint_test.cc)
simcuda_add_test(simcuda_sharing_test SOURCES ${_simcuda_tests}/simcuda_sharing_test.cc)
simcuda_add_test(simcuda_faults_test SOURCES ${_simcuda_tests}/simcuda_faults_test.cc)
simcuda_add_test(simcuda_multicast_test SOURCES ${_simcuda_tests}/simcuda_multicast_test.cc)
simcuda_add_test(simcuda_multicast_team_test SOURCES ${_simcuda_tests}/simcuda_multicast_team_test.cc)
simcuda_add_test(simcuda_runtime_test SOURCES ${_simcuda_tests}/simcuda_runtime_test.cc LIBS simcuda_runtime)
simcuda_add_test(simcuda_driver13000_test SOURCES ${_simcuda_tests}/simcuda_driver13000_test.cc OWN_MAIN)
simcuda_add_test(simcuda_numa_attribute_test SOURCES ${_simcuda_tests}/simcuda_numa_attribute_test.cc)
