#!/usr/bin/env bash
# The README's test command: bootstrap, build the asan preset, run every CI test under
# AddressSanitizer + UndefinedBehaviorSanitizer, then the default preset's build check.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/bootstrap.sh
cmake --preset asan >/dev/null
cmake --build --preset asan
ctest --preset asan "$@"
