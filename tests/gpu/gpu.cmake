# Real-GPU test programs (tests/gpu): built only with -DCUSNAP_BUILD_GPU_TESTS=ON, never run
# by ctest. tests/gpu/run_all.sh runs them on a GPU machine. They use the CUDA driver API
# only (no kernels), link against the driver stub
# (libcuda.so, SONAME libcuda.so.1) at build time and load the real libcuda.so.1 at run time;
# pointing LD_LIBRARY_PATH at the simulated driver's folder runs them without a GPU.
option(CUSNAP_BUILD_GPU_TESTS "Build the real-GPU test programs in tests/gpu" OFF)

if(CUSNAP_BUILD_GPU_TESTS)
  find_library(CUSNAP_CUDA_STUB_LIBRARY NAMES cuda
    HINTS $ENV{CUDA_HOME}/lib64/stubs $ENV{CUDA_PATH}/lib64/stubs
    PATHS /usr/local/cuda/lib64/stubs /usr/local/cuda-13.0/lib64/stubs
          /usr/local/cuda/targets/x86_64-linux/lib/stubs
    NO_DEFAULT_PATH)
  if(NOT CUSNAP_CUDA_STUB_LIBRARY)
    message(FATAL_ERROR "CUSNAP_BUILD_GPU_TESTS: the CUDA driver stub (lib64/stubs/libcuda.so) was not found; set CUDA_HOME")
  endif()
  message(STATUS "cusnap: GPU tests link against ${CUSNAP_CUDA_STUB_LIBRARY}")
  get_filename_component(_cusnap_cuda_stub_dir ${CUSNAP_CUDA_STUB_LIBRARY} DIRECTORY)

  set(_gpu_dir ${CMAKE_CURRENT_LIST_DIR})

  # Helpers shared by the GPU programs: checked driver calls, patterns, descriptor passing.
  add_library(cusnap_gpu_testlib STATIC
    ${_gpu_dir}/gpu_check.cc ${_gpu_dir}/gpu_pattern.cc ${_gpu_dir}/gpu_peer.cc ${_gpu_dir}/gpu_region.cc
    ${_gpu_dir}/gpu_vmm.cc)
  cusnap_warnings(cusnap_gpu_testlib)
  target_include_directories(cusnap_gpu_testlib PUBLIC ${CMAKE_SOURCE_DIR}/src ${CMAKE_SOURCE_DIR}/tests)
  target_link_libraries(cusnap_gpu_testlib PUBLIC cusnap_cuda_headers)

  # cusnap_gpu_program(<name> <source>): a driver-API program linked against the stub by
  # -L/-l (so no run path points at the stub folder: the real driver is found at run time).
  function(cusnap_gpu_program name source)
    add_executable(${name} ${_gpu_dir}/${source})
    cusnap_warnings(${name})
    target_link_libraries(${name} PRIVATE cusnap_gpu_testlib pthread)
    target_link_options(${name} PRIVATE -L${_cusnap_cuda_stub_dir})
    target_link_libraries(${name} PRIVATE cuda)
    set_target_properties(${name} PROPERTIES SKIP_BUILD_RPATH ON)
  endfunction()

  cusnap_gpu_program(gpu_vmm_basic gpu_vmm_basic.cc)
  cusnap_gpu_program(gpu_ticket_pair gpu_ticket_pair.cc)
  target_link_libraries(gpu_ticket_pair PRIVATE cusnap_common)  # reads the ticket it receives
  cusnap_gpu_program(gpu_share_checkpoint gpu_share_checkpoint.cc)
  cusnap_gpu_program(gpu_pinned_baseline gpu_pinned_baseline.cc)
  cusnap_gpu_program(gpu_share_ring gpu_share_ring.cc)          # 2, 4, 8 processes
  cusnap_gpu_program(gpu_meminfo gpu_meminfo.cc)                # memory used per GPU
  cusnap_gpu_program(gpu_multicast_forward gpu_multicast_forward.cc)  # CUSNAP_ALLOW_MULTICAST=1 only
  cusnap_gpu_program(gpu_driver_facts gpu_driver_facts.cc)      # FACT lines for DRIVER-FACTS.md
  cusnap_gpu_program(gpu_carry_hold gpu_carry_hold.cc)          # the suspend/resume bench
  cusnap_gpu_program(gpu_legacy_ipc gpu_legacy_ipc.cc)          # cuIpc* under cusnap

  # Device memory to files and back through small pinned buffers or by pinning the file's
  # own pages (bench/gpu_file_mapping_vs_buffer.cc, run by hand: MEASURED.md M27).
  add_executable(gpu_file_mapping_vs_buffer ${CMAKE_SOURCE_DIR}/bench/gpu_file_mapping_vs_buffer.cc)
  cusnap_warnings(gpu_file_mapping_vs_buffer)
  target_link_libraries(gpu_file_mapping_vs_buffer PRIVATE cusnap_cuda_headers pthread)
  target_link_options(gpu_file_mapping_vs_buffer PRIVATE -L${_cusnap_cuda_stub_dir})
  target_link_libraries(gpu_file_mapping_vs_buffer PRIVATE cuda)
  set_target_properties(gpu_file_mapping_vs_buffer PROPERTIES SKIP_BUILD_RPATH ON)

  # Starts two roles of a program joined by a socket pair; links no CUDA (it is the parent
  # of the job that `cusnap checkpoint --pid` walks).
  add_executable(gpu_pair_launcher ${_gpu_dir}/gpu_pair_launcher.cc)
  cusnap_warnings(gpu_pair_launcher)

  # Asks a shim's endpoint for its sharing table (kIdentify + kInspect) and prints counts.
  add_executable(gpu_inspect ${_gpu_dir}/gpu_inspect.cc)
  cusnap_warnings(gpu_inspect)
  target_link_libraries(gpu_inspect PRIVATE cusnap_common)

  # The interception table against the real driver: every row's `since` and flag resolve to
  # the row's own exported symbol (loads libcuda.so.1 itself, links no stub).
  add_executable(gpu_abi_table ${_gpu_dir}/gpu_abi_table.cc)
  cusnap_warnings(gpu_abi_table)
  target_include_directories(gpu_abi_table PRIVATE ${CMAKE_SOURCE_DIR}/src)
  target_link_libraries(gpu_abi_table PRIVATE cusnap_cuda_headers dl)

  # Everything tests/gpu/run_all.sh needs, and nothing else (the folder is carried to the GPU
  # machine): `cmake --build <build> --target cusnap_gpu_tests`.
  add_custom_target(cusnap_gpu_tests DEPENDS cusnap cusnap_shim gpu_vmm_basic gpu_ticket_pair
    gpu_share_checkpoint gpu_pinned_baseline gpu_meminfo gpu_multicast_forward gpu_pair_launcher
    gpu_inspect gpu_share_ring gpu_driver_facts gpu_abi_table gpu_legacy_ipc gpu_carry_hold
    gpu_file_mapping_vs_buffer)
endif()
