"""Workload 4 (GPU): a PyTorch + NCCL job (one rank per GPU) that also holds private GPU memory,
started unmodified under `cusnap run`, checkpointed and restored once while its ranks idle.

Besides the NCCL buffers and the captured all_reduce of test_workload_nccl.py, each rank holds
256 MiB of caching-allocator tensors (int64, float32, uint8, seeded random), a block from
torch.cuda.caching_allocator_alloc and one from cudaMalloc (libcudart through ctypes), each
filled with seeded random bytes (workload_rank.py --parts nccl,private). The ranks take a
SHA-256 of every one at the start and compare it after the restore: private memory goes
through the native checkpoint untouched by cusnap and must come back byte for byte, next to
the shared memory cusnap rebuilt.
"""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
import workload_common as wc  # noqa: E402


@pytest.fixture(scope="module")
def job():
    workload = wc.Workload("private-memory", "nccl,private", cycles=1)
    try:
        workload.start()
        yield workload
    finally:
        workload.stop()


def test_private_memory_unchanged_after_restore(job):
    job.run_cycle(1)


if __name__ == "__main__":
    sys.exit(pytest.main(["-s", "-v", "-p", "no:cacheprovider", __file__]))
