# End-to-end tests of the real `cusnap` binary on the simulated driver (issue 3, "Must show
# (CI)"): multi-process jobs of job_worker processes started through `cusnap run`, checkpointed
# and restored with every byte and VA checked; refusals that leave the job intact; the
# native-only baseline (DRIVER-FACTS F5). Label: integration.

# One process of a job, driven by a command language on stdin (job_worker.cc). Linked against
# the simulated libcuda.so.1 like any CUDA program; `cusnap run` preloads the shim.
add_executable(job_worker ${CMAKE_CURRENT_LIST_DIR}/job_worker.cc)
cusnap_warnings(job_worker)
target_include_directories(job_worker PRIVATE ${CMAKE_SOURCE_DIR}/src ${CMAKE_SOURCE_DIR}/src/simcuda/include)
target_link_libraries(job_worker PRIVATE cusnap_common cusnap_cuda_headers simcuda_driver)

cusnap_add_gtest(cli_job_test
  SOURCES
    ${CMAKE_CURRENT_LIST_DIR}/job_harness.cc
    ${CMAKE_CURRENT_LIST_DIR}/cli_job_cycles.cc
    ${CMAKE_CURRENT_LIST_DIR}/cli_device_map_refusals.cc
    ${CMAKE_CURRENT_LIST_DIR}/cli_job_refusals.cc
    ${CMAKE_CURRENT_LIST_DIR}/cli_native_baseline.cc
  LIBS cusnap_common GTest::gmock nlohmann_json::nlohmann_json
  LABELS integration)
target_include_directories(cli_job_test PRIVATE ${CMAKE_CURRENT_LIST_DIR})
add_dependencies(cli_job_test cusnap cusnap_shim simcuda_driver job_worker)
