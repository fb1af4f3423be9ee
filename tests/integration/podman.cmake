# A Podman container whose entry point is criu_job under `cusnap run`, checkpointed and
# restored by `podman container checkpoint` / `restore` (runc running CRIU with cusnap's plugin
# through the container's org.criu.config annotation); runs on the release build as root
# (scripts/test.sh, which sets Podman up with scripts/container_tools.sh and fails when it
# cannot). Only where the plugin is built, as the CRIU plugin's tests.
if(TARGET cusnap_criu)
  cusnap_add_gtest(podman_test
    SOURCES ${CMAKE_CURRENT_LIST_DIR}/podman_test.cc
    LIBS cusnap_coordinator
    LABELS integration)
  add_dependencies(podman_test cusnap_criu cusnap cusnap_shim simcuda_driver criu_job)
endif()
