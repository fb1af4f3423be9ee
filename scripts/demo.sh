#!/usr/bin/env bash
# The README's main-job command: bootstrap, build the default preset, and run `cusnap demo`
# (a two-process job sharing VMM memory, checkpointed, restored and verified; on the GPUs
# when there are some, otherwise on the simulated driver, and it says which).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/bootstrap.sh
cmake --preset default >/dev/null
cmake --build --preset default
exec build/default/bin/cusnap demo "$@"
