# Build check of libcusnap.so: its exports are exactly the interception table's names (plus
# dlsym and cusnap_build_info), no NEEDED libcuda/libcudart, the glibc ceiling, -z defs
# (tests/unit/build_check.py). Every table symbol through every resolver path, with the shim
# preloaded into probe programs: tests/integration/interception.cmake.
find_package(Python3 REQUIRED COMPONENTS Interpreter)
set(_cusnap_build_check_args
  --library=$<TARGET_FILE:cusnap_shim>
  --table=${CMAKE_SOURCE_DIR}/src/shim/driver/entry_points.def
  --table=${CUSNAP_GATED_TABLE}
  "--link-options=$<JOIN:$<TARGET_PROPERTY:cusnap_shim,LINK_OPTIONS>, >")
if(CUSNAP_SANITIZE)
  list(APPEND _cusnap_build_check_args --sanitize)
endif()
add_test(NAME BuildCheck.libcusnap
  COMMAND Python3::Interpreter ${CMAKE_CURRENT_LIST_DIR}/build_check.py ${_cusnap_build_check_args})
set_tests_properties(BuildCheck.libcusnap PROPERTIES LABELS unit TIMEOUT 60)
