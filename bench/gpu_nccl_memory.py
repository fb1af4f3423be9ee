#!/usr/bin/env python3
"""GPU memory of the NCCL workload plainly and under `cusnap run` (issue 14: the memory
overhead of serving cuMemAlloc with VMM allocations, docs/MEASURED.md), in one command.

The job is the GPU tests' NCCL workload (tests/gpu/workload_rank.py, parts nccl and private:
an NCCL process group, an eager all_reduce and one captured in a CUDA graph, caching-allocator
tensors, a caching_allocator_alloc block and a raw cudaMalloc block), one process per rank
started by tests/gpu/rank_launcher.py, rank r on GPU r. Variants alternate (plain, shim,
plain, shim, ...) so that drift of the machine falls on both. When every rank is idle at its
first READY point, the memory each rank's process holds is read from nvidia-smi
(--query-compute-apps: the driver's per-process figure, which includes the CUDA context), and
the GPUs' total use above the baseline taken before the job started. Then the job finishes its
round and must print DONE PASS on every rank.

    bench/gpu_nccl_memory.py --build <gpu build> [--ranks N] [--repeats 2]
        [--allreduce-mib 256] [--graph-mib 64] [--timeout-s 240]

Prints a "NCCL MEMORY RUN" line per run and one summary line "NCCL MEMORY: plain P MiB, shim S
MiB (R x), ..." (medians over the repeats, per-process memory summed over the ranks). Exit 0
when every run passed, 1 when one failed, 77 ("SKIP: ...") without nvidia-smi, torch, or as
many GPUs as --ranks.
"""

import argparse
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SRC = Path(__file__).resolve().parent.parent
GPU_TESTS = SRC / "tests" / "gpu"
NO_MULTICAST = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}
SKIP_STATUS = 77
READY = re.compile(r"WL rank=(\d+) pid=(\d+) READY 1\b")


def smi(*query):
    out = subprocess.run(["nvidia-smi", *query, "--format=csv,noheader,nounits"], stdout=subprocess.PIPE,
                         text=True, timeout=60, check=True).stdout
    return [[f.strip() for f in line.split(",")] for line in out.strip().splitlines() if line.strip()]


def gpu_used_mib():
    return sum(int(used) for _, used in smi("--query-gpu=index,memory.used"))


def process_mib(pids):
    """MiB the driver reports for each of `pids` (0 for one it does not list)."""
    rows = smi("--query-compute-apps=pid,used_memory")
    held = {int(pid): int(used) for pid, used in rows if used.isdigit()}
    return [held.get(pid, 0) for pid in pids]


def run_once(args, variant, work):
    control = Path(tempfile.mkdtemp(prefix=f"nccl-mem-{variant}-", dir=work))
    log = control / "job.log"
    env = dict(os.environ, **NO_MULTICAST, OMP_NUM_THREADS="1", NCCL_DEBUG="WARN",
               CUDA_DEVICE_ORDER="PCI_BUS_ID", CUSNAP_CONTROL_DIR=str(control / "ctl"))
    (control / "ctl").mkdir(mode=0o700)
    command = [sys.executable, str(GPU_TESTS / "rank_launcher.py"), "--ranks", str(args.ranks),
               str(GPU_TESTS / "workload_rank.py"), "--parts", "nccl,private", "--cycles", "1",
               "--control", str(control), "--allreduce-mib", str(args.allreduce_mib),
               "--graph-mib", str(args.graph_mib)]
    if variant == "shim":
        command = [str(Path(args.build) / "bin" / "cusnap"), "run", "--"] + command
    baseline = gpu_used_mib()
    with open(log, "wb") as out:
        job = subprocess.Popen(command, env=env, stdin=subprocess.DEVNULL, stdout=out,
                               stderr=subprocess.STDOUT, start_new_session=True, cwd=str(GPU_TESTS))
    try:
        deadline = time.monotonic() + args.timeout_s
        pids = {}
        while time.monotonic() < deadline and len(pids) < args.ranks and job.poll() is None:
            pids = {int(r): int(p) for r, p in READY.findall(log.read_text(errors="replace"))}
            time.sleep(0.5)
        if len(pids) < args.ranks:
            raise RuntimeError(f"not every rank got ready:\n{log.read_text(errors='replace')[-3000:]}")
        time.sleep(1.0)  # the ranks are idle at READY: nothing allocates any more
        per_process = process_mib([pids[r] for r in sorted(pids)])
        above_baseline = gpu_used_mib() - baseline
        (control / "go-1").touch()
        rc = job.wait(timeout=args.timeout_s)
        text = log.read_text(errors="replace")
        passed = rc == 0 and len(re.findall(r"WL rank=\d+ DONE PASS", text)) == args.ranks
        if not passed:
            raise RuntimeError(f"the job did not pass (exit {rc}):\n{text[-3000:]}")
    finally:
        if job.poll() is None:
            os.killpg(job.pid, signal.SIGKILL)
            job.wait()
    shutil.rmtree(control, ignore_errors=True)
    print(f"NCCL MEMORY RUN variant={variant} ranks={args.ranks} per_process_mib={per_process} "
          f"sum_mib={sum(per_process)} gpu_above_baseline_mib={above_baseline}", flush=True)
    return sum(per_process), above_baseline


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--build", required=True)
    parser.add_argument("--ranks", type=int, default=0, help="default: every GPU, at most 2")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--allreduce-mib", type=int, default=256)
    parser.add_argument("--graph-mib", type=int, default=64)
    parser.add_argument("--timeout-s", type=int, default=240)
    args = parser.parse_args()
    if not shutil.which("nvidia-smi"):
        print("SKIP: nvidia-smi is not on PATH")
        return SKIP_STATUS
    gpus = len(smi("--query-gpu=index"))
    args.ranks = args.ranks or min(gpus, 2)
    if gpus < args.ranks:
        print(f"SKIP: {args.ranks} ranks need {args.ranks} GPUs, this machine has {gpus}")
        return SKIP_STATUS
    probe = subprocess.run([sys.executable, "-c", "import torch; assert torch.cuda.is_available()"],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=120)
    if probe.returncode != 0:
        print("SKIP: torch cannot be imported or sees no GPU")
        return SKIP_STATUS
    work = Path(tempfile.mkdtemp(prefix="nccl-memory-"))
    results = {"plain": [], "shim": []}
    try:
        for _ in range(args.repeats):
            for variant in ("plain", "shim"):
                results[variant].append(run_once(args, variant, work))
    except (RuntimeError, subprocess.TimeoutExpired) as e:
        print(f"NCCL MEMORY FAILED: {e}", flush=True)
        return 1
    finally:
        shutil.rmtree(work, ignore_errors=True)
    plain = statistics.median(s for s, _ in results["plain"])
    shim = statistics.median(s for s, _ in results["shim"])
    plain_gpu = statistics.median(g for _, g in results["plain"])
    shim_gpu = statistics.median(g for _, g in results["shim"])
    print(f"NCCL MEMORY: plain {plain:.0f} MiB, shim {shim:.0f} MiB ({shim / plain:.3f}x, "
          f"+{shim - plain:.0f} MiB) summed over {args.ranks} rank processes (nvidia-smi per "
          f"process); GPU use above baseline {plain_gpu:.0f} / {shim_gpu:.0f} MiB; medians of "
          f"{args.repeats} runs each; all_reduce {args.allreduce_mib} MiB, graph {args.graph_mib} MiB",
          flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
