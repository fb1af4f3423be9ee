# libcusnap_criu.so loaded by CRIU (src/criu_plugin), on the release build (scripts/test.sh):
#   criu_plugin_test: `criu dump` / `criu restore` of criu_job (two processes sharing memory
#     under `cusnap run`) with the plugin's folder as CRIU's plugin directory;
#   criu_plugin_faults_test: the same with a job cusnap refuses, and a participant killed at
#     each of the plugin's hooks;
#   podman_test: a Podman container whose entry point is criu_job, checkpointed and restored
#     by `podman container checkpoint` / `restore` (runc runs CRIU with the plugin, named by
#     the container's org.criu.config annotation); as root, with Podman set up by
#     scripts/container_tools.sh (scripts/test.sh fails when it cannot be).
# Only where the plugin is built (CRIU's header found: scripts/fetch_criu.sh); the tests then
# fail, never skip, when CRIU cannot run. Their CRIU comes as for the images tests
# (tests/criu_problem.h).
if(TARGET cusnap_criu)
  foreach(test criu_plugin_test criu_plugin_faults_test podman_test)
    cusnap_add_gtest(${test}
      SOURCES ${test}.cc
      LIBS cusnap_coordinator
      LABELS integration)
    add_dependencies(${test} cusnap_criu cusnap cusnap_shim simcuda_driver criu_job)
  endforeach()
endif()
