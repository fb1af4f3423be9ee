"""Workloads 2 and 3 (GPU): PyTorch symmetric memory with multicast disabled
(TORCH_SYMM_MEM_DISABLE_MULTICAST=1), one rank per GPU under torchrun started unmodified with
`cusnap run`, checkpointed and restored three times while its ranks idle: in place, onto
rotated GPUs by index (`--device-map 0=1,1=2,...,n-1=0`: with two GPUs a swap), and rotated
back by UUID.

Each rank allocates a symmetric buffer (torch.distributed._symmetric_memory.empty +
rendezvous over the gloo group), runs torch.ops.symm_mem.one_shot_all_reduce eagerly and
one_shot_all_reduce_out captured in a CUDA graph (workload_rank.py --parts symm). After every
restore the ranks check that the previous results are still in GPU memory, then run both with
fresh inputs and check the exact sums; a missing symmetric-memory API makes the rank print the
exception and fail. Memory, placement and phase lines as in test_workload_nccl.py.
"""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
import workload_common as wc  # noqa: E402


class TestSymmetricMemory(wc.RotatedCycles):
    NAME = "symm-mem"
    PARTS = "symm"


if __name__ == "__main__":
    sys.exit(pytest.main(["-s", "-v", "-p", "no:cacheprovider", __file__]))
