#!/usr/bin/env python3
"""The job of bench/gpu_images_vs_native.py: PyTorch processes, each holding its GiB of
caching-allocator tensors (1 GiB each, random bytes from a seeded generator on the GPU) and a
CUDA graph (an add over a small tensor, captured once).

    gpu_images_job.py --gib 8 --go <file>          one process of 8 GiB
    gpu_images_job.py --gib 8+8+1 --go <file>      this process (8 GiB) and two children of it

Prints "READY <pid>" once every process has everything on the GPU, then waits for <file> to
exist; then each process checks every tensor against its checksum taken before READY (int64
sums of the bytes, on the GPU) and replays the graph. Prints "PASS <bytes checked>" when every
process passed, else "FAIL <why>", and exits. Its output must go to a file: CRIU dumps and
restores the processes with it.
"""

import argparse
import os
import subprocess
import sys
import time

import torch


def checksum(t):
    """A sum of the tensor's bytes as int64 words: any changed word changes it (almost surely)."""
    return int(t.view(torch.int64).sum().item())


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--gib", required=True, help="<GiB>[+<GiB>...]: one per process")
    parser.add_argument("--go", required=True)
    parser.add_argument("--ready", help="(a child) the file it creates once READY")
    args = parser.parse_args()
    own, *others = (int(g) for g in args.gib.split("+"))
    children = [subprocess.Popen([sys.executable, __file__, "--gib", str(g), "--go", args.go,
                                  "--ready", f"{args.go}.ready{i}"], stdin=subprocess.DEVNULL)
                for i, g in enumerate(others)]
    children_ready = [f"{args.go}.ready{i}" for i in range(len(others))]
    failed = hold_and_check(own, args.go, args.ready, children_ready)
    failed += sum(child.wait() != 0 for child in children)
    if not args.ready:
        total = (own + sum(others)) << 30
        print(f"FAIL {failed} process(es)" if failed else f"PASS {total}", flush=True)
    return 1 if failed else 0


def hold_and_check(gib, go, ready, children_ready):
    """Holds `gib` GiB and a graph until `go` exists, then checks them; 1 when they changed."""
    generator = torch.Generator(device="cuda").manual_seed(1234)
    tensors = []
    for _ in range(gib):
        t = torch.empty(1 << 30, dtype=torch.uint8, device="cuda")
        t.random_(0, 256, generator=generator)
        tensors.append(t)
    sums = [checksum(t) for t in tensors]
    small = torch.arange(1 << 20, dtype=torch.float32, device="cuda")
    out = torch.empty_like(small)
    graph = torch.cuda.CUDAGraph()
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        with torch.cuda.graph(graph):
            out.copy_(small + 1.0)
    torch.cuda.synchronize()
    while not all(os.path.exists(f) for f in children_ready):
        time.sleep(0.05)
    if ready:
        open(ready, "w").close()
    else:
        print(f"READY {os.getpid()}", flush=True)
    while not os.path.exists(go):
        time.sleep(0.05)
    for i, t in enumerate(tensors):
        if checksum(t) != sums[i]:
            print(f"FAIL tensor {i} changed", flush=True)
            return 1
    graph.replay()
    torch.cuda.synchronize()
    if not torch.equal(out, small + 1.0):
        print("FAIL the graph's replay", flush=True)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
