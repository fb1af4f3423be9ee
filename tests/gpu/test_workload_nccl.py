"""Workloads 1 and 3 (GPU): a PyTorch + NCCL job with one rank per GPU (2 on our
machines), started unmodified under `cusnap run` (torchrun), checkpointed and restored three
times while its ranks idle: in place, onto rotated GPUs by index (`--device-map
0=1,1=2,...,n-1=0`: with two GPUs `0=1,1=0`, a swap), and rotated back by UUID
(`--device-map GPU-<i+1>=GPU-<i>,...`).

Each rank holds a 256 MiB buffer it all_reduces eagerly and a 64 MiB all_reduce captured in a
CUDA graph (workload_rank.py --parts nccl). After every restore the ranks check that the
previous results are still in GPU memory, then all_reduce and replay the graph with fresh
inputs (new values copied into the graph's static input) and check the exact sums. Each cycle
also checks that the checkpoint released the job's GPU memory and the restore brought it back
(nvidia-smi), and, after a rotation, that each rank now runs on the GPU the map named. The CLI's phase
lines are printed as "WORKLOAD PHASE ..." lines.

The three cycles run on one job, in order; a failed cycle fails the ones after it at once.
"""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
import workload_common as wc  # noqa: E402


class TestNccl(wc.RotatedCycles):
    NAME = "nccl"
    PARTS = "nccl"


if __name__ == "__main__":
    sys.exit(pytest.main(["-s", "-v", "-p", "no:cacheprovider", __file__]))
