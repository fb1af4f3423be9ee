"""One rank of the 2-rank PyTorch + NCCL all_reduce that test_nccl_allreduce.py runs with and
without the shim (GPU). Rendezvous through the environment (MASTER_ADDR,
MASTER_PORT, RANK, WORLD_SIZE); rank r uses GPU r.

Prints "RESULT ..." lines that must be identical with and without the shim (exact integer
arithmetic only), then, unless --no-pause, "PAUSED pid=<pid>" and waits for one line on
standard input while the test inspects this process's cusnap endpoint; then one more
all_reduce (the job still works after inspection) and "DONE".
"""

import os
import sys

import torch
import torch.distributed as dist


def main():
    pause = "--no-pause" not in sys.argv
    rank = int(os.environ["RANK"])
    world = int(os.environ["WORLD_SIZE"])
    device = torch.device("cuda", rank)
    torch.cuda.set_device(device)
    dist.init_process_group("nccl", rank=rank, world_size=world, device_id=device)

    # Sum of (rank + 1) over ranks: 3.0 for two ranks, in every element.
    x = torch.full((1 << 20,), float(rank + 1), device=device)
    dist.all_reduce(x)
    # Exact in float32: every value stays below 2^24.
    n = 1 << 21
    y = torch.arange(n, dtype=torch.float32, device=device) * (rank + 1)
    dist.all_reduce(y)
    z = torch.arange(n, dtype=torch.int64, device=device) * (rank + 7)
    dist.all_reduce(z)
    torch.cuda.synchronize()

    ranks_sum = sum(r + 1 for r in range(world))
    x_ok = bool(torch.all(x == float(ranks_sum)).item())
    y_ok = torch.equal(y, torch.arange(n, dtype=torch.float32, device=device) * ranks_sum)
    z_ok = torch.equal(z, torch.arange(n, dtype=torch.int64, device=device) * sum(r + 7 for r in range(world)))
    print(f"RESULT rank {rank}: all_reduce of {x.numel()} x {rank + 1}.0 -> {x[0].item()} "
          f"(all equal: {x_ok}); float arange exact: {y_ok}; int64 arange exact: {z_ok}; "
          f"int64 sum {int(z.sum().item())}", flush=True)
    ok = x_ok and y_ok and z_ok

    if pause:
        print(f"PAUSED pid={os.getpid()}", flush=True)
        sys.stdin.readline()
    w = torch.ones(1 << 16, device=device) * (rank + 1)
    dist.all_reduce(w)
    torch.cuda.synchronize()
    again_ok = bool(torch.all(w == float(ranks_sum)).item())
    print(f"RESULT rank {rank}: all_reduce after the pause exact: {again_ok}", flush=True)
    dist.barrier()
    dist.destroy_process_group()
    print("DONE", flush=True)
    return 0 if ok and again_ok else 1


if __name__ == "__main__":
    sys.exit(main())
