#!/usr/bin/env bash
# The README's test command (and CI's, .ci/run): bootstrap, build the asan preset and the
# release preset in full (every preset must build everything it configures, on the compiler
# the README names: GCC 12 finds warnings at -O3 that -O2 does not), then run every CI test
# under AddressSanitizer + UndefinedBehaviorSanitizer, and the fault matrix (tests/faults) on
# the release build. Arguments go to ctest (e.g. -R Cli).
# CUSNAP_SKIP_RELEASE=1 leaves the release build out (a quicker local run; CI never sets it).
# Last, the libFuzzer targets (scripts/fuzz.sh: protocol decoder, ticket parser, state-file
# reader) run CUSNAP_FUZZ_SECONDS (default 30) seconds each, when no ctest arguments were given.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/bootstrap.sh
# CRIU, its plugin header and its CUDA plugin (scripts/fetch_criu.sh) for the images tests
# (cli_images_test: dump and restore in new processes) and the CRIU plugin's tests
# (src/criu_plugin, tests/integration/criu_plugin_test.cc): CI fails when they cannot be set
# up, and CUSNAP_CRIU_PLUGIN=ON makes a build without the plugin's header fail too.
scripts/fetch_criu.sh
# Podman, runc and the busybox image localhost/cusnap-base for the container tests
# (tests/integration/podman_test.cc, on the release build): CI runs as root and fails when
# they cannot be set up; the exports it prints (CUSNAP_PODMAN...) reach the tests.
if [[ ${CUSNAP_SKIP_RELEASE:-0} != 1 ]]; then
  container_exports=$(scripts/container_tools.sh) || { echo "test: scripts/container_tools.sh failed" >&2; exit 1; }
  printf '%s\n' "$container_exports"
  eval "$(grep '^export ' <<<"$container_exports")"
fi
cmake --preset asan -DCUSNAP_CRIU_PLUGIN=ON >/dev/null
cmake --build --preset asan
if [[ ${CUSNAP_SKIP_RELEASE:-0} != 1 ]]; then
  cmake --preset release -DCUSNAP_CRIU_PLUGIN=ON >/dev/null
  cmake --build --preset release
fi
# Unit tests that lower their own RLIMIT_AS (the resource check; the shim's threads when none
# can start, tests/without_threads.h) cannot run under AddressSanitizer (its shadow
# reservations fail the next mmap): they skip themselves there and run here on the release
# build.
# The fault matrix (tests/faults, label faults; the asan preset leaves it out) runs here too,
# on the non-sanitised build; a failure of it is reported after the asan suite has run.
faults_rc=0
if [[ ${CUSNAP_SKIP_RELEASE:-0} != 1 && $# -eq 0 ]]; then
  # CRIU cannot dump sanitised processes (their shadow mappings), so the round trips through
  # CRIU (CliImages; CriuPlugin: plain CRIU with cusnap's plugin; Podman: a container's
  # checkpoint through runc and the plugin) run here; under the asan preset they skip themselves.
  # Each pattern must name at least one test: a renamed suite would otherwise run nothing here
  # and skip under asan, unseen (ShimResources.CarrierGrowthPastRlimitAsIsNamed did).
  # Every suite whose name starts with CliImages, Criu or Podman, parameterised ones too
  # ("Steps/CriuPlugin..."): a new suite of CRIU round trips is taken without a new line here.
  release_only=('ShimResources\.CarrierGrowthPastRlimitAsIsNamed' 'ShimThreads\.'
                'CarrierWithoutThreads\.' '([A-Za-z]+/)?CliImages' '([A-Za-z]+/)?Criu'
                '([A-Za-z]+/)?Podman')
  for pattern in "${release_only[@]}"; do
    if ctest --preset release -N -R "^$pattern" | grep -q '^Total Tests: 0'; then
      echo "test: no release test matches ^$pattern" >&2
      exit 1
    fi
  done
  ctest --preset release -R "^($(IFS='|'; echo "${release_only[*]}"))"
  ctest --preset release -L faults || faults_rc=$?
fi
ctest --preset asan "$@"
if [[ $# -eq 0 ]]; then
  scripts/fuzz.sh
fi
exit "$faults_rc"
