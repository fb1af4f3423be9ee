# Unit tests of the shim's sharing core (sharing table, logical handles, export cache) and of
# the common pieces it stands on (tickets, socket helpers, endpoint client). The shim's core
# files make no driver calls, so they are compiled straight into the test.
cusnap_add_gtest(sharing_unit_test
  SOURCES
    ${CMAKE_CURRENT_LIST_DIR}/sharing_table_test.cc
    ${CMAKE_CURRENT_LIST_DIR}/sharing_ticket_test.cc
    ${CMAKE_CURRENT_LIST_DIR}/sharing_socket_test.cc
    ${CMAKE_CURRENT_LIST_DIR}/security_socket_test.cc
    ${CMAKE_CURRENT_LIST_DIR}/common_text_test.cc
    ${CMAKE_CURRENT_LIST_DIR}/common_durations_test.cc
    ${CMAKE_SOURCE_DIR}/src/shim/tables/sharing_table.cc
    ${CMAKE_SOURCE_DIR}/src/shim/tables/capabilities.cc
    ${CMAKE_SOURCE_DIR}/src/shim/tables/untracked_imports.cc
    ${CMAKE_SOURCE_DIR}/src/shim/tables/handles.cc
    ${CMAKE_SOURCE_DIR}/src/shim/tables/export_cache.cc
  LIBS cusnap_common cusnap_cuda_headers pthread
  LABELS unit)
