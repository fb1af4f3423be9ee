# `cusnap demo` end to end (the built binary, its worker, the shim and the simulated driver),
# and a job whose non-CUDA launcher carries the shim, checkpointed through the CLI.
find_package(nlohmann_json 3 REQUIRED)
cusnap_add_gtest(cli_demo_test
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/cli_demo_test.cc
  LIBS nlohmann_json::nlohmann_json GTest::gmock
  LABELS integration cli)
add_dependencies(cli_demo_test cusnap cusnap_demo_worker cusnap_shim simcuda_driver)

# A non-CUDA launcher (started with `cusnap run`, so it has an endpoint) that forks the
# lifecycle test's peer program (tests/unit/lifecycle.cmake) as creator and importer.
add_executable(cli_tree_launcher ${CMAKE_CURRENT_LIST_DIR}/cli_tree_launcher.cc)
cusnap_warnings(cli_tree_launcher)
cusnap_add_gtest(cli_tree_test
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/cli_tree_test.cc
  LIBS nlohmann_json::nlohmann_json GTest::gmock
  LABELS integration cli)
add_dependencies(cli_tree_test cusnap cusnap_shim simcuda_driver cli_tree_launcher lifecycle_cycle_peer)

# The coordinator side of the two fixes above, over fakes: bytes fed to the progress bar, and
# no native calls for a participant the driver does not know.
cusnap_add_gtest(coordinator_progress_test
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/coordinator_progress_test.cc
  LIBS cusnap_coordinator GTest::gmock
  LABELS unit coordinator)
