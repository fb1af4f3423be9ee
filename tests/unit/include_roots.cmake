# The include roots keep the layers apart (cmake/include_roots.cmake): a shim source that
# includes a coordinator header, or a coordinator source that includes a shim header, does
# not compile. Each probe is a target outside `all`, built by its test, which passes only
# when the compiler stops at the forbidden include.
foreach(probe shim_includes_coordinator coordinator_includes_shim common_includes_shim)
  add_library(include_probe_${probe} OBJECT EXCLUDE_FROM_ALL
    ${CMAKE_SOURCE_DIR}/tests/build_checks/${probe}.cc)
  target_link_libraries(include_probe_${probe} PRIVATE cusnap_cuda_headers)
  add_test(NAME BuildCheck.include_roots_${probe}
    COMMAND ${CMAKE_COMMAND} --build ${CMAKE_BINARY_DIR} --target include_probe_${probe})
  set_tests_properties(BuildCheck.include_roots_${probe} PROPERTIES
    LABELS unit
    PASS_REGULAR_EXPRESSION "${probe}.cc:[0-9]+:[0-9]+: fatal error: [a-z]+/[a-z_/]+\\.h: No such file or directory")
endforeach()
target_include_directories(include_probe_shim_includes_coordinator PRIVATE ${CUSNAP_INCLUDE_ROOT_shim})
target_include_directories(include_probe_coordinator_includes_shim PRIVATE ${CUSNAP_INCLUDE_ROOT_coordinator})
target_include_directories(include_probe_common_includes_shim PRIVATE ${CUSNAP_INCLUDE_ROOT_common})

# The coordinator's rooms (cmake/include_roots.cmake, CUSNAP_COORDINATOR_ROOMS): a probe per
# room includes a header of the room just above it (the top room, the face) and compiles
# against the room's own include root, so that the test passes only when the compiler stops
# at that include.
set(rooms_above ${CUSNAP_COORDINATOR_ROOMS})
list(POP_FRONT rooms_above)
list(APPEND rooms_above face)
foreach(room above IN ZIP_LISTS CUSNAP_COORDINATOR_ROOMS rooms_above)
  set(probe coordinator_${room}_includes_${above})
  add_library(include_probe_${probe} OBJECT EXCLUDE_FROM_ALL
    ${CMAKE_SOURCE_DIR}/tests/build_checks/${probe}.cc)
  target_link_libraries(include_probe_${probe} PRIVATE cusnap_common cusnap_cuda_headers
    nlohmann_json::nlohmann_json)
  target_include_directories(include_probe_${probe} PRIVATE ${CUSNAP_INCLUDE_ROOT_coordinator_${room}})
  add_test(NAME BuildCheck.coordinator_rooms_${room}_below_${above}
    COMMAND ${CMAKE_COMMAND} --build ${CMAKE_BINARY_DIR} --target include_probe_${probe})
  set_tests_properties(BuildCheck.coordinator_rooms_${room}_below_${above} PROPERTIES
    LABELS unit
    PASS_REGULAR_EXPRESSION "${probe}.cc:4:[0-9]+: fatal error: coordinator/[a-z_/]+\\.h: No such file or directory")
endforeach()

# The shim's floors (cmake/include_roots.cmake, CUSNAP_SHIM_FLOORS): for each floor but the
# top one, a probe compiled against that floor's root includes one of its own headers, then
# one of the floor just above, and must stop there. (intercept, the top floor, has no header:
# nothing below can include it.)
set(_cusnap_floor_header_driver shim/driver/driver_api.h)
set(_cusnap_floor_header_tables shim/tables/handles.h)
set(_cusnap_floor_header_carrier shim/carrier/carrier.h)
set(_cusnap_floor_header_hold shim/hold/hold_guard.h)
set(_cusnap_floor_header_lifecycle shim/lifecycle/lifecycle.h)
set(_cusnap_floor_header_endpoint shim/endpoint/served.h)
set(_cusnap_floor_header_process shim/process.h)
set(_cusnap_floor_header_hooks shim/hooks/hooks.h)
set(_cusnap_floor_below)
foreach(floor IN LISTS CUSNAP_SHIM_FLOORS)
  if(_cusnap_floor_below AND DEFINED _cusnap_floor_header_${floor})
    set(below ${_cusnap_floor_below})
    set(probe include_probe_shim_floor_${below})
    add_library(${probe} OBJECT EXCLUDE_FROM_ALL
      ${CMAKE_SOURCE_DIR}/tests/build_checks/shim_floor_includes_above.cc)
    target_link_libraries(${probe} PRIVATE cusnap_cuda_headers)
    target_include_directories(${probe} PRIVATE ${CUSNAP_INCLUDE_ROOT_shim_${below}})
    target_compile_definitions(${probe} PRIVATE
      "CUSNAP_PROBE_OWN=\"${_cusnap_floor_header_${below}}\""
      "CUSNAP_PROBE_ABOVE=\"${_cusnap_floor_header_${floor}}\"")
    add_test(NAME BuildCheck.shim_floor_${below}_includes_${floor}
      COMMAND ${CMAKE_COMMAND} --build ${CMAKE_BINARY_DIR} --target ${probe})
    string(REPLACE "." "\\." _cusnap_above_regex "${_cusnap_floor_header_${floor}}")
    set_tests_properties(BuildCheck.shim_floor_${below}_includes_${floor} PROPERTIES
      LABELS unit
      PASS_REGULAR_EXPRESSION "fatal error: ${_cusnap_above_regex}: No such file or directory")
  endif()
  set(_cusnap_floor_below ${floor})
endforeach()
