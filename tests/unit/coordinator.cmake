# Coordinator unit tests: topology validation, the state file, the device map, and the
# checkpoint/restore sequences over fake participants and a fake native driver (discovery
# forks idle children only so that /proc has a process tree to read).
cusnap_add_gtest(coordinator_unit_test
  SOURCES coordinator_topology_test.cc coordinator_state_file_test.cc
    coordinator_device_map_test.cc coordinator_native_driver_test.cc
    coordinator_sequence_test.cc coordinator_hold_test.cc coordinator_images_test.cc
    common_settings_test.cc coordinator_criu_messages_test.cc
  LIBS cusnap_coordinator
  LABELS unit)
# The settings table is checked against README.md's (common_settings_test.cc).
target_compile_definitions(coordinator_unit_test PRIVATE
  CUSNAP_README_PATH="${CMAKE_SOURCE_DIR}/README.md")

# The coordinator's side of the progress bar and of a tree with a non-CUDA launcher, over
# fakes: bytes fed to the progress bar, and no native calls for a participant the driver
# does not know (end to end: tests/integration/cli.cmake).
cusnap_add_gtest(coordinator_progress_test
  SOURCES coordinator_progress_test.cc
  LIBS cusnap_coordinator
  LABELS unit)
