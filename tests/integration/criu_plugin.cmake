# libcusnap_criu.so loaded by CRIU (src/criu_plugin): `criu dump` / `criu restore` of
# criu_job (two processes sharing memory under `cusnap run`) with the plugin's folder as
# CRIU's plugin directory; runs on the release build (scripts/test.sh). Only where the
# plugin is built (CRIU's header found: scripts/fetch_criu.sh); the test then fails, never
# skips, when CRIU cannot run. Its CRIU comes as for the images tests (tests/criu_problem.h).
if(TARGET cusnap_criu)
  cusnap_add_gtest(criu_plugin_test
    SOURCES criu_plugin_test.cc
    LIBS cusnap_coordinator
    LABELS integration)
  add_dependencies(criu_plugin_test cusnap_criu cusnap cusnap_shim simcuda_driver criu_job)
endif()
