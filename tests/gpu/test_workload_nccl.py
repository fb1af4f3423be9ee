"""Issue 4, workloads 1 and 3 (GPU): a 2-rank PyTorch + NCCL job, started unmodified under
`cusnap run` (torchrun, one GPU per rank), checkpointed and restored three times while its
ranks idle: in place, onto swapped GPUs by index (`--device-map 0=1,1=0`), and swapped back
by UUID (`--device-map GPU-a=GPU-b,GPU-b=GPU-a`).

Each rank holds a 256 MiB buffer it all_reduces eagerly and a 64 MiB all_reduce captured in a
CUDA graph (workload_rank.py --parts nccl). After every restore the ranks check that the
previous results are still in GPU memory, then all_reduce and replay the graph with fresh
inputs (new values copied into the graph's static input) and check the exact sums. Each cycle
also checks that the checkpoint released the job's GPU memory and the restore brought it back
(nvidia-smi), and, after a swap, that each rank now runs on the other GPU. The CLI's phase
lines are printed as "WORKLOAD PHASE ..." lines.

The three cycles run on one job, in order; a failed cycle fails the ones after it at once.
"""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
import workload_common as wc  # noqa: E402


class TestNccl(wc.SwappedCycles):
    NAME = "nccl"
    PARTS = "nccl"


if __name__ == "__main__":
    sys.exit(pytest.main(["-s", "-v", "-p", "no:cacheprovider", __file__]))
