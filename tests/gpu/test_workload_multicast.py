"""GPU: PyTorch symmetric memory WITH multicast, one rank per GPU under torchrun started
unmodified with `cusnap run`, checkpointed and restored while its ranks idle.

Runs ONLY when CUSNAP_ALLOW_MULTICAST=1, which is never set on this project's machines:
rendezvous with multicast calls cuMulticastCreate, which there can take the host's GPUs out of
service (DRIVER-FACTS F9). Otherwise the whole module is skipped at collection time, before
torch or anything else touches CUDA, and the job's environment keeps
TORCH_SYMM_MEM_DISABLE_MULTICAST=1.

Each rank allocates two symmetric buffers (symm_mem.empty + rendezvous; multicast_ptr must be
non-zero) and runs torch.ops.symm_mem.multimem_all_reduce_ in place on one eagerly and on the
other captured in a CUDA graph (workload_rank.py --parts symm_mc). Three cycles: in place, onto
rotated GPUs by index (with two GPUs `--device-map 0=1,1=0`), back by UUID. After each restore the ranks check that the previous
results are still in GPU memory, then run both with fresh inputs and check the exact sums.
Memory, placement and phase lines as in test_workload_nccl.py.
"""

import os
import sys
from pathlib import Path

import pytest

MULTICAST_ALLOWED = os.environ.get("CUSNAP_ALLOW_MULTICAST") == "1"
if not MULTICAST_ALLOWED:
    pytest.skip("SKIP: cuMulticastCreate is never called unless CUSNAP_ALLOW_MULTICAST=1 "
                "(DRIVER-FACTS F9)", allow_module_level=True)

sys.path.insert(0, str(Path(__file__).resolve().parent))
import workload_common as wc  # noqa: E402


class TestSymmetricMemoryMulticast(wc.RotatedCycles):
    NAME = "symm-multicast"
    PARTS = "symm_mc"
    # Only here (CUSNAP_ALLOW_MULTICAST=1): let PyTorch create multicast objects; gpu_harness
    # forces the no-multicast settings into every other child's environment.
    ENV = {"TORCH_SYMM_MEM_DISABLE_MULTICAST": "0"}


if __name__ == "__main__":
    sys.exit(pytest.main(["-s", "-v", "-p", "no:cacheprovider", __file__]))
