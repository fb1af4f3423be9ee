# A new user's path through the real `cusnap`: mistakes named before anything
# changes (cli_mistakes_test.cc, cli_settings_test.cc), and the installed tree: `cmake
# --install` into a scratch prefix, then `cusnap demo` from there (install_demo.sh). Label:
# integration.

cusnap_add_gtest(cli_mistakes_test
  SOURCES cli_mistakes_test.cc
  LIBS GTest::gmock nlohmann_json::nlohmann_json
  LABELS integration
  TIMEOUT 300)
add_dependencies(cli_mistakes_test cusnap cusnap_shim simcuda_driver)

# Every setting of the settings table refused by `cusnap run` and each command that reads it,
# and a preloaded shim's bad setting logged and shown by `status` (cli_settings_test.cc).
cusnap_add_gtest(cli_settings_test
  SOURCES cli_settings_test.cc
  LIBS GTest::gmock nlohmann_json::nlohmann_json cusnap_common
  LABELS integration
  TIMEOUT 300)
add_dependencies(cli_settings_test cusnap cusnap_shim simcuda_driver)

add_test(NAME Install.DemoFromInstalledTree
  COMMAND ${CMAKE_CURRENT_LIST_DIR}/install_demo.sh ${CMAKE_BINARY_DIR} ${CMAKE_BINARY_DIR}/install-test)
set_tests_properties(Install.DemoFromInstalledTree PROPERTIES
  TIMEOUT 300 LABELS integration ENVIRONMENT "${CUSNAP_TEST_ENV}")

# The man page and the completion scripts the build wrote from cusnap's own options name every
# option of every command and no other, and are what the built cusnap prints now
# (cli_docs_check.sh).
add_test(NAME CliDocs.ManPageAndCompletionsNameEveryOptionAndNoOther
  COMMAND ${CMAKE_CURRENT_LIST_DIR}/cli_docs_check.sh $<TARGET_FILE:cusnap> ${CMAKE_BINARY_DIR}/share)
set_tests_properties(CliDocs.ManPageAndCompletionsNameEveryOptionAndNoOther PROPERTIES
  TIMEOUT 120 LABELS integration ENVIRONMENT "${CUSNAP_TEST_ENV}")

# The documents installed under share/doc/cusnap are exactly README.md and those it links
# (install_docs_check.sh).
add_test(NAME Install.DocumentsAreTheReadmesLinks
  COMMAND ${CMAKE_CURRENT_LIST_DIR}/install_docs_check.sh ${CMAKE_BINARY_DIR}
    ${CMAKE_BINARY_DIR}/install-docs-test ${CMAKE_SOURCE_DIR})
set_tests_properties(Install.DocumentsAreTheReadmesLinks PROPERTIES
  TIMEOUT 120 LABELS integration)

# The README's first steps, job.py and its commands as written, on the simulated driver
# (readme_first_steps.sh).
add_test(NAME Readme.FirstStepsCheckpointAndRestoreTheUsersJob
  COMMAND ${CMAKE_CURRENT_LIST_DIR}/readme_first_steps.sh ${CMAKE_RUNTIME_OUTPUT_DIRECTORY}
    ${CMAKE_SOURCE_DIR}/README.md)
set_tests_properties(Readme.FirstStepsCheckpointAndRestoreTheUsersJob PROPERTIES
  TIMEOUT 120 LABELS integration ENVIRONMENT "${CUSNAP_TEST_ENV}")
