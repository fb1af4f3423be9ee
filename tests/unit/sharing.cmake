# Unit tests of the shim's sharing core (sharing table, logical handles, export cache) and of
# the common pieces it stands on (tickets, socket helpers, endpoint client). The shim's core
# files make no driver calls, so they are compiled straight into the test.
cusnap_add_gtest(sharing_unit_test
  SOURCES sharing_table_test.cc sharing_ticket_test.cc sharing_socket_test.cc
    security_socket_test.cc common_text_test.cc common_durations_test.cc
    ${CUSNAP_TEST_SHIM_SHARING}
  LIBS cusnap_common cusnap_cuda_headers pthread
  LABELS unit)
