# The fault matrix (tests/faults/fault_matrix_test.cc): every
# phase of checkpoint, restore, dump and restore --images-dir under SIGINT/SIGKILL of the CLI,
# SIGKILL of each participant and an error in each driver call, on the job_worker jobs of
# tests/integration (its JobTest harness) and its criu_job (the dump cases, when CRIU runs). One CTest entry, label `faults`, that runs the cases on a process pool of its own;
# it is left out of the default and asan test presets (minutes of work, and the sanitised
# build is not its target): scripts/test.sh runs it on the release preset.
set(CUSNAP_FAULT_JOB_SOURCES
  ${CMAKE_CURRENT_LIST_DIR}/fault_case.cc
  ${CMAKE_CURRENT_LIST_DIR}/fault_job.cc
  ${CMAKE_CURRENT_LIST_DIR}/../integration/job_harness.cc)
add_executable(fault_matrix_test ${CUSNAP_FAULT_JOB_SOURCES} ${CMAKE_CURRENT_LIST_DIR}/fault_matrix_test.cc)
cusnap_warnings(fault_matrix_test)
target_link_libraries(fault_matrix_test PRIVATE GTest::gtest GTest::gmock GTest::gtest_main
  cusnap_coordinator nlohmann_json::nlohmann_json)
target_include_directories(fault_matrix_test PRIVATE ${CMAKE_SOURCE_DIR}/src ${CMAKE_SOURCE_DIR}/tests
  ${CMAKE_CURRENT_LIST_DIR}/../integration)
add_dependencies(fault_matrix_test cusnap cusnap_shim simcuda_driver job_worker criu_job)
target_compile_definitions(fault_matrix_test PRIVATE
  CUSNAP_FAULT_KNOWN_OPEN="${CMAKE_CURRENT_LIST_DIR}/known_open.txt")
add_test(NAME fault_matrix
  COMMAND env ${CUSNAP_TEST_ENV} $<TARGET_FILE:fault_matrix_test> --gtest_filter=FaultMatrix.EveryCase)
set_tests_properties(fault_matrix PROPERTIES LABELS faults TIMEOUT 900 PROCESSORS 2)

# The case lines and their enumeration, without a job (fast: every preset runs it).
cusnap_add_gtest(fault_case_test
  SOURCES fault_case.cc fault_case_test.cc
  LABELS unit)

# The pause knob (src/cli/test_pause.h) on its own, on the matrix's job (every preset runs it).
cusnap_add_gtest(pause_knob_test
  SOURCES ${CUSNAP_FAULT_JOB_SOURCES} pause_knob_test.cc
  LIBS cusnap_coordinator nlohmann_json::nlohmann_json
  LABELS integration)
target_include_directories(pause_knob_test PRIVATE ${CMAKE_CURRENT_LIST_DIR}/../integration)
add_dependencies(pause_knob_test cusnap cusnap_shim simcuda_driver job_worker)
