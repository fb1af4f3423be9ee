#!/usr/bin/env bash
# The README's first command: bootstrap, build with the default preset what `cusnap demo` needs
# (cusnap, its worker, the shim and the simulated driver) and the example jobs the README
# names (criu_job), and run the demo: a two-process job sharing VMM memory, checkpointed,
# restored and verified; on the GPUs when there are some, otherwise on the simulated driver,
# and it says which. Arguments go to `cusnap demo`
# (e.g. --json, --sizes 64M,1G,4G). CUSNAP_BUILD_JOBS sets the build's parallelism.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/bootstrap.sh
cmake --preset default >/dev/null
cmake --build --preset default --target cusnap criu_job -j "${CUSNAP_BUILD_JOBS:-$(nproc)}"
exec build/default/bin/cusnap demo "$@"
