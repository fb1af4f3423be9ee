# Tests of the simulated CUDA driver (src/simcuda). Test programs link the built libcuda.so.1
# (and libcudart.so.13) directly; their RPATH points into ${CUSNAP_SIMCUDA_DIR}.

# simcuda_add_test(<name> SOURCES <files...> [LIBS <libs...>] [ENV <VAR=value...>])
# Like cusnap_add_gtest, with extra environment for the driver (e.g. SIMCUDA_DRIVER_VERSION).
function(simcuda_add_test name)
  cmake_parse_arguments(ARG "" "" "SOURCES;LIBS;ENV" ${ARGN})
  add_executable(${name} ${ARG_SOURCES})
  cusnap_warnings(${name})
  target_link_libraries(${name} PRIVATE GTest::gtest GTest::gtest_main simcuda_driver cusnap_cuda_headers
    pthread ${ARG_LIBS})
  target_include_directories(${name} PRIVATE ${CMAKE_SOURCE_DIR}/tests/unit)
  # gtest_discover_tests flattens PROPERTIES: escape the list so every variable arrives.
  set(env ${CUSNAP_TEST_ENV} ${ARG_ENV})
  string(REPLACE ";" "\\;" env "${env}")
  gtest_discover_tests(${name} DISCOVERY_MODE PRE_TEST
    PROPERTIES ENVIRONMENT "${env}" LABELS "simcuda" TIMEOUT 120)
endfunction()

simcuda_add_test(simcuda_resolver_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/simcuda_resolver_test.cc LIBS dl)
