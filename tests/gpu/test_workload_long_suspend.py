"""Long suspends (GPU): the NCCL workload (workload_rank.py --parts nccl) held
checkpointed for longer than its PyTorch timeouts, then restored: it runs on and exits 0 with
exact results (docs/LONG-SUSPEND.md).

The timeouts are short so that the run stays small: TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC (the
heartbeat monitor's watchdog check, 480 s by default) and the process group's timeout (the
watchdog's per-collective timeout and the TCPStore client's, `init_process_group(timeout=)`)
are GPU_LONG_SUSPEND_TIMEOUT_S (30 s); each hold lasts GPU_LONG_SUSPEND_HOLD_S (75 s: more
than twice the heartbeat timeout, the monitor aborts after two of them).

One rank per GPU; one GPU is enough (a one-rank NCCL process group has the watchdog, the
heartbeat monitor and the TCPStore too). Two cycles on one job:
  1. the default hold (CUSNAP_HOLD=stop): every rank stopped while held, continued at restore;
  2. CUSNAP_HOLD=run: the ranks stay runnable while held (their CUDA calls wait).
After each restore the ranks check their kept results and all_reduce / replay the graph with
fresh inputs (exact sums); after the last one, every rank prints DONE PASS and the launcher
exits 0.
"""

import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
import workload_common as wc  # noqa: E402

TIMEOUT_S = int(os.environ.get("GPU_LONG_SUSPEND_TIMEOUT_S", "30"))
HOLD_S = int(os.environ.get("GPU_LONG_SUSPEND_HOLD_S", "75"))
RUN_HOLD_S = int(os.environ.get("GPU_LONG_SUSPEND_RUN_HOLD_S", str(HOLD_S)))  # cycle 2's hold


@pytest.fixture(scope="module")
def job():
    workload = wc.heartbeat_workload("long-suspend", cycles=2, timeout_s=TIMEOUT_S)
    try:
        workload.start()
        yield workload
    finally:
        workload.stop()


def test_held_stopped_longer_than_the_timeouts(job):
    job.cli_env["CUSNAP_HOLD"] = "stop"
    job.run_cycle(1, hold_s=HOLD_S, hold_stops=True)


def test_held_running_longer_than_the_timeouts(job):
    job.cli_env["CUSNAP_HOLD"] = "run"
    job.run_cycle(2, hold_s=RUN_HOLD_S, hold_stops=False)


if __name__ == "__main__":
    sys.exit(pytest.main(["-s", "-v", "-p", "no:cacheprovider", __file__]))
