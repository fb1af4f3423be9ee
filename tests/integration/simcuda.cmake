# The simulated driver across processes (simcuda_add_test, in tests/CMakeLists.txt): export
# and import between processes, multicast teams of processes, and the checkpoint API acting
# on other processes (DRIVER-FACTS F1-F7, F12-F14). Children are forked before the test process
# initialises the driver and driven over pipes. One process: tests/unit/simcuda.cmake.
set(_simcuda_tests ${CMAKE_CURRENT_LIST_DIR})
simcuda_add_test(simcuda_checkpoint_test SOURCES ${_simcuda_tests}/simcuda_checkpoint_test.cc LABELS integration)
simcuda_add_test(simcuda_sharing_test SOURCES ${_simcuda_tests}/simcuda_sharing_test.cc LABELS integration)
simcuda_add_test(simcuda_multicast_team_test SOURCES ${_simcuda_tests}/simcuda_multicast_team_test.cc LABELS integration)
simcuda_add_test(simcuda_visible_devices_test SOURCES ${_simcuda_tests}/simcuda_visible_devices_test.cc LABELS integration)
simcuda_add_test(simcuda_ipc_test SOURCES ${_simcuda_tests}/simcuda_ipc_test.cc LABELS integration)
