# The files made from cusnap's own options (cmake -DCUSNAP=<cusnap> -DOUT=<dir> -P this):
# <dir>/man/man1/cusnap.1 (`cusnap man-page`) and the completion scripts of bash, zsh and fish
# (`cusnap completion <shell>`), each where that program looks under a prefix's share/.
# Run after every link of cusnap (src/cli/CMakeLists.txt), so none lags behind its options.
function(cusnap_write path)
  get_filename_component(_dir "${OUT}/${path}" DIRECTORY)
  file(MAKE_DIRECTORY "${_dir}")
  execute_process(COMMAND "${CUSNAP}" ${ARGN} OUTPUT_FILE "${OUT}/${path}" RESULT_VARIABLE _rc)
  if(NOT _rc EQUAL 0)
    message(FATAL_ERROR "cusnap ${ARGN} failed (${_rc}): ${OUT}/${path} not written")
  endif()
endfunction()

cusnap_write(man/man1/cusnap.1 man-page)
cusnap_write(bash-completion/completions/cusnap completion bash)
cusnap_write(zsh/site-functions/_cusnap completion zsh)
cusnap_write(fish/vendor_completions.d/cusnap.fish completion fish)
