# libcusnap_criu.so loaded by CRIU (src/criu_plugin), on the release build (scripts/test.sh):
#   criu_plugin_test: `criu dump` / `criu restore` of criu_job (two processes sharing memory
#     under `cusnap run`) with the plugin's folder as CRIU's plugin directory;
#   criu_plugin_faults_test: the same with a job cusnap refuses, a participant killed at each
#     of the plugin's hooks, and a driver error at each step that calls the driver in the job;
#   criu_cuda_plugin_test: the same with CRIU's CUDA plugin beside ours (scripts/fetch_criu.sh
#     builds it), running cuda_checkpoint_standin as `cuda-checkpoint`;
#   podman_test: a Podman container whose entry point is criu_job, checkpointed and restored
#     by `podman container checkpoint` / `restore` (runc runs CRIU with the plugin, named by
#     the container's org.criu.config annotation); as root, with Podman set up by
#     scripts/container_tools.sh (scripts/test.sh fails when it cannot be).
# Only where the plugin is built (CRIU's header found: scripts/fetch_criu.sh); the tests then
# fail, never skip, when CRIU cannot run. Their CRIU comes as for the images tests
# (tests/criu_problem.h).
if(TARGET cusnap_criu)
  # NVIDIA's `cuda-checkpoint` as CRIU's CUDA plugin runs it, over the simulated driver, alone
  # in a folder of its own (the test puts that folder first on CRIU's PATH).
  add_executable(cuda_checkpoint_standin ${CMAKE_CURRENT_LIST_DIR}/cuda_checkpoint_standin.cc)
  cusnap_warnings(cuda_checkpoint_standin)
  target_link_libraries(cuda_checkpoint_standin PRIVATE cusnap_cuda_headers simcuda_driver)
  set_target_properties(cuda_checkpoint_standin PROPERTIES OUTPUT_NAME cuda-checkpoint
    RUNTIME_OUTPUT_DIRECTORY ${CMAKE_RUNTIME_OUTPUT_DIRECTORY}/cuda-checkpoint-standin)
  foreach(test criu_plugin_test criu_plugin_faults_test criu_cuda_plugin_test podman_test)
    cusnap_add_gtest(${test}
      SOURCES ${test}.cc
      LIBS cusnap_coordinator
      LABELS integration)
    add_dependencies(${test} cusnap_criu cusnap cusnap_shim simcuda_driver criu_job
      cuda_checkpoint_standin)
  endforeach()
endif()
