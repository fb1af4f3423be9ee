"""Workload 1 without cusnap (GPU): the same PyTorch + NCCL job as
test_workload_nccl.py, started WITHOUT the shim, and only the native checkpoint API called on
both ranks (workload_native.py: cuCheckpointProcessLock, Checkpoint, Restore, Unlock through
libcuda, nothing else). DRIVER-FACTS F8 measured what happens: lock and checkpoint succeed,
restore fails CUDA_ERROR_NOT_SUPPORTED (801) on both ranks, unlock fails
CUDA_ERROR_ILLEGAL_STATE (401), and both ranks stay stuck. This test asserts exactly that, then
kills the stuck ranks: next to test_workload_nccl.py it documents what cusnap changes.

It runs last among the workloads: it leaves processes the driver considers checkpointed until
they are killed.
"""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
import gpu_harness as h  # noqa: E402
import workload_common as wc  # noqa: E402

NOT_SUPPORTED = 801   # CUDA_ERROR_NOT_SUPPORTED
ILLEGAL_STATE = 401   # CUDA_ERROR_ILLEGAL_STATE


def test_native_checkpoint_leaves_nccl_ranks_stuck():
    workload = wc.Workload("nccl-native", "nccl", cycles=1, shim=False)
    try:
        workload.start()
        pids = [workload.pids[r] for r in range(workload.ranks)]
        env = h.job_env(None, LD_PRELOAD=None)
        before, source = h.memory_used_mib(env)
        h.log(f"native only: ranks {pids} idle; GPU memory used ({source}) {before} MiB")
        result = wc.native_cycle(pids, env)
        after, _ = h.memory_used_mib(env)
        h.log(f"native only: GPU memory used after the native cycle {after} MiB; "
              f"ranks on {wc.gpu_placement(pids)}")
        steps = result["steps"]
        table = {step: [steps[step].get(str(p)) for p in pids] for step in ("lock", "checkpoint", "restore", "unlock")}
        h.log(f"native only, CUresult per rank: {table}; states after each step: {result['states']}")
        n = len(pids)
        print("WORKLOAD NATIVE without cusnap: " + ", ".join(f"{s} {v}" for s, v in table.items())
              + f" (DRIVER-FACTS F8, per rank: lock 0, checkpoint 0, restore {NOT_SUPPORTED}, "
              f"unlock {ILLEGAL_STATE})", flush=True)
        assert table["lock"] == [0] * n, f"native lock failed: {table['lock']}"
        assert table["checkpoint"] == [0] * n, f"native checkpoint failed: {table['checkpoint']}"
        assert table["restore"] == [NOT_SUPPORTED] * n, (
            f"native restore returned {table['restore']}, DRIVER-FACTS F8 says {NOT_SUPPORTED} on both "
            "ranks: the driver's behaviour changed, update F8 and this test")
        assert table["unlock"] == [ILLEGAL_STATE] * n, (
            f"native unlock returned {table['unlock']}, DRIVER-FACTS F8 says {ILLEGAL_STATE} on both ranks")
        h.log("native only: as F8 says, the job cannot continue; killing the stuck ranks "
              "(with cusnap, test_workload_nccl.py restores the same job and its results are exact)")
    finally:
        workload.stop()
    left = [p for p in workload.pids.values() if Path(f"/proc/{p}").exists()]
    h.log(f"native only: after the kill, rank processes left: {left or 'none'}")


if __name__ == "__main__":
    sys.exit(pytest.main(["-s", "-v", "-p", "no:cacheprovider", __file__]))
