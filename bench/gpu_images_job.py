#!/usr/bin/env python3
"""The job of bench/gpu_images_vs_native.py: one PyTorch process holding --gib GiB of
caching-allocator tensors (1 GiB each, random bytes from a seeded generator on the GPU) and a
CUDA graph (an add over a small tensor, captured once).

    gpu_images_job.py --gib 8 --go <file>

Prints "READY <pid>" once everything is on the GPU, then waits for <file> to exist; then
checks every tensor against its checksum taken before READY (int64 sums of the bytes, on
the GPU) and replays the graph, printing "PASS <bytes checked>" or "FAIL <why>", and exits.
Its output must go to a file: CRIU dumps and restores the process with it.
"""

import argparse
import os
import sys
import time

import torch


def checksum(t):
    """A sum of the tensor's bytes as int64 words: any changed word changes it (almost surely)."""
    return int(t.view(torch.int64).sum().item())


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--gib", type=int, required=True)
    parser.add_argument("--go", required=True)
    args = parser.parse_args()
    generator = torch.Generator(device="cuda").manual_seed(1234)
    tensors = []
    for _ in range(args.gib):
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
    print(f"READY {os.getpid()}", flush=True)
    while not os.path.exists(args.go):
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
    print(f"PASS {args.gib << 30}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
