# intercept_bench: ns the shim adds per intercepted call, against the driver's own pointer,
# on the simulated driver (a target only, not a test: timings are not pass/fail on a shared
# CI machine). How to run it: see the top of intercept_bench.cc.
add_executable(intercept_bench ${CMAKE_CURRENT_LIST_DIR}/intercept_bench.cc)
cusnap_warnings(intercept_bench)
target_include_directories(intercept_bench PRIVATE ${CMAKE_SOURCE_DIR}/src)
target_link_libraries(intercept_bench PRIVATE cusnap_cuda_headers dl)
target_compile_definitions(intercept_bench PRIVATE
  CUSNAP_BENCH_SHIM="$<TARGET_FILE:cusnap_shim>"
  CUSNAP_BENCH_SIMCUDA_DIR="${CUSNAP_SIMCUDA_DIR}")
add_dependencies(intercept_bench cusnap_shim simcuda_driver)
if(TARGET benchmark::benchmark)
  target_link_libraries(intercept_bench PRIVATE benchmark::benchmark)
  target_compile_definitions(intercept_bench PRIVATE CUSNAP_HAVE_BENCHMARK=1)
endif()
