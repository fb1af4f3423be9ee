#!/usr/bin/env bash
# Builds the libFuzzer targets of tests/fuzz (the protocol decoder, the ticket parser,
# the state-file reader) with clang (-fsanitize=fuzzer,address,undefined) into build/fuzz, and
# runs each for CUSNAP_FUZZ_SECONDS (default 30) seconds. Exit status non-zero when a target
# does not build or finds a crash, a leak or undefined behaviour (its reproducer is left in
# build/fuzz/<target>.run/). scripts/test.sh runs it; CUSNAP_FUZZ_SECONDS=0 builds without running.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${CUSNAP_FUZZ_SECONDS:-30}
cxx=${CUSNAP_FUZZ_CXX:-clang++}
cuda_include=${CUDA_HOME:-/usr/local/cuda}/include
out=build/fuzz
mkdir -p "$out"
flags=(-std=c++20 -O1 -g -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined
       -Wall -Wextra -Werror -Isrc -isystem "$cuda_include")
common=(src/common/messages.cc src/common/socket.cc src/common/ids.cc src/common/log.cc
        src/common/text.cc src/common/ticket.cc src/common/endpoint_client.cc
        src/common/control_dir.cc src/common/settings.cc)
coordinator=(src/coordinator/record/state_file.cc src/coordinator/record/records.cc
             src/coordinator/record/state_guard.cc src/coordinator/proc/processes.cc
             src/coordinator/record/sha256.cc)
# Each source compiled once (clang, instrumented), then each target linked from what it needs.
objects() {
  local list=()
  for source in "$@"; do
    local object="$out/obj/${source//\//_}.o"
    mkdir -p "$out/obj"
    # Rebuilt when missing, or older than its source or any header (no dependency tracking).
    if [[ ! -f $object || $source -nt $object ||
          -n $(find src tests/fuzz -name '*.h' -newer "$object" -print -quit) ]]; then
      "$cxx" "${flags[@]}" -c "$source" -o "$object"
    fi
    list+=("$object")
  done
  echo "${list[@]}"
}
# shellcheck disable=SC2046
"$cxx" "${flags[@]}" $(objects tests/fuzz/fuzz_protocol.cc "${common[@]}") -o "$out/fuzz_protocol"
# shellcheck disable=SC2046
"$cxx" "${flags[@]}" $(objects tests/fuzz/fuzz_ticket.cc "${common[@]}") -o "$out/fuzz_ticket"
# shellcheck disable=SC2046
"$cxx" "${flags[@]}" $(objects tests/fuzz/fuzz_state_file.cc "${common[@]}" "${coordinator[@]}") \
  -lcrypto -o "$out/fuzz_state_file"
[[ $seconds == 0 ]] && exit 0
for target in fuzz_protocol fuzz_ticket fuzz_state_file; do
  mkdir -p "$out/$target.corpus" "$out/$target.run"
  # The seeds (tests/fuzz/corpus/<name>: well-formed inputs to mutate from) join the corpus.
  cp -n tests/fuzz/corpus/"${target#fuzz_}"/* "$out/$target.corpus"/ 2>/dev/null || true
  echo "fuzz: $target for ${seconds}s"
  if ! (cd "$out/$target.run" && ASAN_OPTIONS=detect_leaks=1 "../$target" -max_total_time="$seconds" \
          -timeout=10 -rss_limit_mb=2048 -max_len=65536 "../$target.corpus" >log 2>&1); then
    tail -n 40 "$out/$target.run/log"
    echo "fuzz: $target found a problem (reproducer and log in $out/$target.run)"
    exit 1
  fi
  grep -E "^Done|DONE" "$out/$target.run/log" | tail -n 1
done
