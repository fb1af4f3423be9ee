# The shim's interception layer: every table symbol through every
# resolver path. interception_test runs interception_probe with and without the shim
# preloaded and compares what each path answers. The build check of libcusnap.so:
# tests/unit/build_check.cmake.

# The probe links the simulated libcuda.so.1 and libcudart.so.13 directly (the "direct" path).
add_executable(interception_probe ${CMAKE_CURRENT_LIST_DIR}/interception_probe.cc)
cusnap_warnings(interception_probe)
target_include_directories(interception_probe PRIVATE ${CMAKE_SOURCE_DIR}/src)
target_link_libraries(interception_probe PRIVATE simcuda_driver simcuda_runtime cusnap_cuda_headers dl)

# A second interposer, preloaded after the shim by the RTLD_NEXT scope test.
add_library(interception_interposer SHARED ${CMAKE_CURRENT_LIST_DIR}/interception_interposer.cc)
cusnap_warnings(interception_interposer)
target_include_directories(interception_interposer PRIVATE ${CMAKE_SOURCE_DIR}/src)
target_link_libraries(interception_interposer PRIVATE cusnap_cuda_headers dl)

cusnap_add_gtest(interception_test SOURCES interception_test.cc LABELS integration)
target_compile_definitions(interception_test PRIVATE
  CUSNAP_TEST_PROBE="$<TARGET_FILE:interception_probe>"
  CUSNAP_TEST_INTERPOSER="$<TARGET_FILE:interception_interposer>")
target_link_libraries(interception_test PRIVATE cusnap_gated_table)
add_dependencies(interception_test interception_probe interception_interposer cusnap_shim
  simcuda_driver simcuda_runtime)

# Fail closed: a driver answering an intercepted name with an ABI the table lacks gets "not
# found" from the shim. The fake driver is a libcuda.so.1 in a folder of its own.
add_library(interception_fakecuda SHARED ${CMAKE_CURRENT_LIST_DIR}/interception_fakecuda.cc)
set_target_properties(interception_fakecuda PROPERTIES OUTPUT_NAME cuda SOVERSION 1
  LIBRARY_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/interception_fakecuda)
cusnap_warnings(interception_fakecuda)
target_include_directories(interception_fakecuda PRIVATE ${CMAKE_SOURCE_DIR}/src)
target_link_libraries(interception_fakecuda PRIVATE cusnap_cuda_headers)
target_link_options(interception_fakecuda PRIVATE -Wl,-Bsymbolic-functions)
add_executable(interception_failclosed ${CMAKE_CURRENT_LIST_DIR}/interception_failclosed.cc)
cusnap_warnings(interception_failclosed)
target_include_directories(interception_failclosed PRIVATE ${CMAKE_SOURCE_DIR}/src)
target_link_libraries(interception_failclosed PRIVATE cusnap_cuda_headers dl)
target_compile_definitions(interception_test PRIVATE
  CUSNAP_TEST_FAILCLOSED="$<TARGET_FILE:interception_failclosed>"
  CUSNAP_TEST_FAKECUDA_DIR="${CMAKE_BINARY_DIR}/interception_fakecuda")
add_dependencies(interception_test interception_failclosed interception_fakecuda)

# No entry point bypasses the gate: every generated wrapper, called while the process is
# quiesced, waits until it resumes (gate_probe.cc, run with the shim preloaded).
add_executable(gate_probe ${CMAKE_CURRENT_LIST_DIR}/gate_probe.cc)
cusnap_warnings(gate_probe)
target_include_directories(gate_probe PRIVATE ${CMAKE_SOURCE_DIR}/src)
target_link_libraries(gate_probe PRIVATE cusnap_common cusnap_cuda_headers simcuda_driver dl pthread)
target_compile_definitions(interception_test PRIVATE CUSNAP_TEST_GATE_PROBE="$<TARGET_FILE:gate_probe>")
add_dependencies(interception_test gate_probe)
# Transparency to bad arguments: transparency_probe calls every hand-written hook
# with odd arguments; transparency_test compares its answers with and without the shim.
add_executable(transparency_probe ${CMAKE_CURRENT_LIST_DIR}/transparency_probe.cc)
cusnap_warnings(transparency_probe)
target_link_libraries(transparency_probe PRIVATE simcuda_driver cusnap_cuda_headers)
cusnap_add_gtest(transparency_test SOURCES transparency_test.cc LABELS integration)
target_compile_definitions(transparency_test PRIVATE
  CUSNAP_TEST_TRANSPARENCY_PROBE="$<TARGET_FILE:transparency_probe>")
add_dependencies(transparency_test transparency_probe cusnap_shim simcuda_driver)
