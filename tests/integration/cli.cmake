# End-to-end tests of the real `cusnap` binary on the simulated driver, in CI: multi-process
# jobs of job_worker processes started through `cusnap run`, checkpointed
# and restored with every byte and VA checked; refusals that leave the job intact; the
# native-only baseline (DRIVER-FACTS F5); the binary's own options, the demo, and a job
# under a non-CUDA launcher. Label: integration.

# One process of a job, driven by a command language on stdin (job_worker.cc). Linked against
# the simulated libcuda.so.1 like any CUDA program; `cusnap run` preloads the shim.
add_executable(job_worker ${CMAKE_CURRENT_LIST_DIR}/job_worker.cc ${CMAKE_CURRENT_LIST_DIR}/job_workload.cc
  ${CMAKE_CURRENT_LIST_DIR}/job_worker_heartbeat.cc)
cusnap_warnings(job_worker)
target_include_directories(job_worker PRIVATE ${CMAKE_SOURCE_DIR}/src ${CMAKE_SOURCE_DIR}/src/simcuda/include)
target_link_libraries(job_worker PRIVATE cusnap_common cusnap_cuda_headers simcuda_driver pthread)

# cusnap_add_job_test(<name> SOURCES <files...> [LIBS <libs...>] [DEPENDS <targets...>]
#                     [TIMEOUT <s>])
# An integration test of job_worker jobs through the real `cusnap`, on the JobTest harness
# (job_harness.cc, compiled in): the harness's libraries and the programs it starts come
# with it; LIBS and DEPENDS add to them.
function(cusnap_add_job_test name)
  cmake_parse_arguments(ARG "" "TIMEOUT" "SOURCES;LIBS;DEPENDS" ${ARGN})
  cusnap_add_gtest(${name}
    SOURCES ${CMAKE_CURRENT_FUNCTION_LIST_DIR}/job_harness.cc ${ARG_SOURCES}
    LIBS cusnap_common nlohmann_json::nlohmann_json ${ARG_LIBS}
    LABELS integration
    TIMEOUT ${ARG_TIMEOUT})
  target_include_directories(${name} PRIVATE ${CMAKE_CURRENT_FUNCTION_LIST_DIR})
  add_dependencies(${name} cusnap cusnap_shim simcuda_driver job_worker ${ARG_DEPENDS})
endfunction()

cusnap_add_job_test(cli_job_test
  SOURCES cli_job_cycles.cc cli_job_carry.cc cli_job_hold.cc cli_device_map_refusals.cc
    cli_job_visible.cc cli_job_refusals.cc cli_job_transaction.cc cli_job_interrupts.cc
    cli_job_security.cc cli_job_recover.cc cli_native_baseline.cc cli_legacy_ipc.cc
    cli_job_status.cc
  LIBS cusnap_coordinator
  # A recover test (workers whose every copy is delayed 700 ms, then a full cycle) takes
  # ~60 s under AddressSanitizer on CI's 2 cores and ~95 s on a loaded one.
  TIMEOUT 300)

# The `cusnap` binary run as a child process: --help, bad arguments, exit codes, inspect.
cusnap_add_gtest(cli_test
  SOURCES cli_test.cc
  LIBS cusnap_coordinator
  LABELS integration)
add_dependencies(cli_test cusnap)
foreach(dep cusnap_shim simcuda_driver)
  if(TARGET ${dep})
    add_dependencies(cli_test ${dep})
  endif()
endforeach()

# `cusnap` end to end over the real shim and the simulated driver, with the lifecycle
# test's peer program (tests/integration/lifecycle.cmake) as the job.
cusnap_add_gtest(cli_cycle_test
  SOURCES cli_cycle_test.cc
  LIBS nlohmann_json::nlohmann_json
  LABELS integration)
add_dependencies(cli_cycle_test cusnap cusnap_shim simcuda_driver lifecycle_cycle_peer)

# `cusnap demo` end to end (the built binary, its worker, the shim and the simulated driver).
cusnap_add_gtest(cli_demo_test
  SOURCES cli_demo_test.cc
  LIBS nlohmann_json::nlohmann_json
  LABELS integration)
add_dependencies(cli_demo_test cusnap cusnap_demo_worker cusnap_shim simcuda_driver)

# A job whose non-CUDA launcher carries the shim, checkpointed through the CLI: the launcher
# (started with `cusnap run`, so it has an endpoint) forks the lifecycle test's peer program
# (tests/integration/lifecycle.cmake) as creator and importer.
add_executable(cli_tree_launcher ${CMAKE_CURRENT_LIST_DIR}/cli_tree_launcher.cc)
cusnap_warnings(cli_tree_launcher)
cusnap_add_gtest(cli_tree_test
  SOURCES cli_tree_test.cc
  LIBS nlohmann_json::nlohmann_json
  LABELS integration)
add_dependencies(cli_tree_test cusnap cusnap_shim simcuda_driver cli_tree_launcher lifecycle_cycle_peer)

# The in-flight-work test: two processes writing and verifying shared memory through
# async copies, memsets and launches on their own streams across ten checkpoint/restore cycles.
cusnap_add_job_test(cli_inflight_test SOURCES cli_inflight_test.cc)

# Every process under the shim has an endpoint whatever entry point it calls first.
add_executable(endpoint_fork_child ${CMAKE_CURRENT_LIST_DIR}/endpoint_fork_child.cc)
cusnap_warnings(endpoint_fork_child)
target_link_libraries(endpoint_fork_child PRIVATE simcuda_driver cusnap_cuda_headers)
cusnap_add_gtest(cli_endpoint_test
  SOURCES cli_endpoint_test.cc
  LIBS cusnap_cuda_headers
  LABELS integration)
add_dependencies(cli_endpoint_test cusnap cusnap_shim simcuda_driver endpoint_fork_child)
# `cusnap dump` / `restore --images-dir` / `inspect` of an images directory:
# refusals with nothing changed (no CRIU needed), and a round trip of criu_job through CRIU
# in new processes when CRIU runs here (scripts/fetch_criu.sh builds it into .criu/; else
# `criu` on PATH; the test skips with CRIU's own words when it cannot run).
add_executable(criu_job ${CMAKE_CURRENT_LIST_DIR}/criu_job.cc)
cusnap_warnings(criu_job)
target_include_directories(criu_job PRIVATE ${CMAKE_SOURCE_DIR}/src ${CMAKE_SOURCE_DIR}/src/simcuda/include)
target_link_libraries(criu_job PRIVATE cusnap_common cusnap_cuda_headers simcuda_driver)
cusnap_add_gtest(cli_images_test
  SOURCES cli_images_test.cc cli_images_pidns_test.cc cli_images_streaming_test.cc
  LIBS cusnap_coordinator nlohmann_json::nlohmann_json
  LABELS integration)
target_include_directories(cli_images_test PRIVATE ${CMAKE_CURRENT_LIST_DIR}/..)
add_dependencies(cli_images_test cusnap cusnap_shim simcuda_driver criu_job)
# A dump's disk-space check after an in-place cycle (cli_images_space_test.cc).
cusnap_add_gtest(cli_images_space_test
  SOURCES cli_images_space_test.cc
  LIBS cusnap_coordinator nlohmann_json::nlohmann_json
  LABELS integration)
target_include_directories(cli_images_space_test PRIVATE ${CMAKE_CURRENT_LIST_DIR}/..)
add_dependencies(cli_images_space_test cusnap cusnap_shim simcuda_driver criu_job)
