"""One rank of the PyTorch workloads (tests/gpu/test_workload_*.py, and the README
section "Checkpointing a PyTorch job"). An ordinary torchrun script: it knows nothing of
cusnap; the only difference between a checkpointed run and a plain one is `cusnap run` in
front of the launcher.

    python3 -m torch.distributed.run --standalone --nproc-per-node 2 workload_rank.py \
        --parts nccl --cycles 1 --control /tmp/job-go

Rank r uses GPU r (LOCAL_RANK). --parts chooses what the job holds and checks (comma list):
  nccl     NCCL process group; all_reduce of --allreduce-mib MiB (eager) and an all_reduce of
           --graph-mib MiB captured in a CUDA graph (warmed up on a side stream first, as the
           PyTorch CUDA graph documentation asks for NCCL)
  symm     PyTorch symmetric memory (torch.distributed._symmetric_memory, multicast disabled
           by TORCH_SYMM_MEM_DISABLE_MULTICAST=1): symm_mem.empty + rendezvous,
           torch.ops.symm_mem.one_shot_all_reduce (eager) and one_shot_all_reduce_out captured
           in a CUDA graph
  symm_mc  PyTorch symmetric memory WITH multicast (only under CUSNAP_ALLOW_MULTICAST=1, never
           on this project's machines: DRIVER-FACTS F9; test_workload_multicast.py): two
           symm_mem buffers after rendezvous (multicast_ptr must be non-zero), in-place
           torch.ops.symm_mem.multimem_all_reduce_ on one eagerly and on the other captured in a
           CUDA graph
  private  private GPU memory: caching-allocator tensors, a torch.cuda.caching_allocator_alloc
           block and a cudaMalloc block (libcudart through ctypes), each with a SHA-256 of its
           bytes taken at the start and compared after every idle point
The process group is NCCL when nccl is among the parts, else gloo.

Rounds: round 0 runs every check once; then, for k = 1..--cycles, the rank prints
"WL rank=<r> pid=<pid> READY <k>" and stays idle (no CUDA call) until the file
<control>/go-<k> exists, then runs round k: it first checks that the results of round k-1 are
still in GPU memory (what a checkpoint and restore must keep), then runs every collective
again with FRESH inputs (new values copied into the graphs' static inputs before replay) and
checks the exact results. Every check prints
"WL rank=<r> round=<k> CHECK <name> PASS|FAIL <detail>". At the end:
"WL rank=<r> DONE PASS|FAIL"; exit status 0 only when every check passed. All values are
small integers held in float32, so every expected result is exact.
"""

import argparse
import ctypes
import datetime
import faulthandler
import gc
import hashlib
import os
import random
import signal
import sys
import time
import traceback

import torch
import torch.distributed as dist

from job_lines import JobLines

MIB = 1 << 20


class Rank(JobLines):
    """What every part needs: rank, world, device, and the check log (the ranks share the
    launcher's stdout pipe: JobLines)."""

    def __init__(self, args):
        self.args = args
        self.rank = int(os.environ["RANK"])
        self.world = int(os.environ["WORLD_SIZE"])
        self.local_rank = int(os.environ.get("LOCAL_RANK", self.rank))
        self.device = torch.device("cuda", self.local_rank)
        super().__init__(f"WL rank={self.rank}")

    def sync(self):
        """Every rank's GPU work finished and every rank here (the next writes to a buffer
        that peers read cannot overtake their reads)."""
        torch.cuda.synchronize(self.device)
        dist.barrier()


def exact(name, rank, got, want):
    """Checks got == want element for element; the detail names the first difference."""
    ok = torch.equal(got, want)
    detail = f"{got.numel()} elements"
    if not ok:
        diff = torch.nonzero(got != want)
        if diff.numel():
            i = int(diff[0].item())
            detail += f"; first difference at {i}: {got.view(-1)[i].item()} != {want.view(-1)[i].item()}"
    rank.check(name, ok, detail)


def offsets(rank, step, per_round, salt):
    """This rank's constant for the round (step * (rank + 1) + per_round * round + salt) and
    its sum over all ranks: each part adds it to its base values, so every rank knows the
    exact all-reduce result."""
    mine = float(step * (rank.rank + 1) + per_round * rank.round + salt)
    total = float(sum(step * (q + 1) for q in range(rank.world)) + rank.world * (per_round * rank.round + salt))
    return mine, total


def capture_graph(dev, collective, warmups, settle):
    """Runs `collective` `warmups` times on a side stream, then captures it in a CUDA graph, as
    the PyTorch CUDA graph documentation asks for collectives; `settle` runs before and after
    each step (a device synchronize, or that and a barrier). thread_local capture: NCCL's and
    PyTorch's helper threads keep making CUDA calls meanwhile."""
    side = torch.cuda.Stream(device=dev)
    side.wait_stream(torch.cuda.current_stream(dev))
    with torch.cuda.stream(side):
        for _ in range(warmups):
            collective()
    torch.cuda.current_stream(dev).wait_stream(side)
    settle()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, capture_error_mode="thread_local"):
        collective()
    settle()
    return graph


def symmetric_memory(group, *ops):
    """torch's symmetric-memory module, enabled for `group` (older releases need that before
    rendezvous; newer ones have no such call), and the torch.ops.symm_mem ops named. A missing
    API fails with a message that names it."""
    try:
        import torch.distributed._symmetric_memory as symm_mem
        found = [getattr(torch.ops.symm_mem, op) for op in ops]
    except (ImportError, AttributeError, RuntimeError) as e:
        raise RuntimeError(f"torch {torch.__version__}: a symmetric-memory API this workload "
                           f"uses is missing: {type(e).__name__}: {e}") from e
    enable = getattr(symm_mem, "enable_symm_mem_for_group", None)
    if enable is not None:
        enable(group)
    return symm_mem, found


class NcclPart:
    """Eager all_reduce of a large buffer and an all_reduce captured in a CUDA graph."""

    def __init__(self, rank):
        self.r = rank
        n = rank.args.allreduce_mib * MIB // 4
        g = rank.args.graph_mib * MIB // 4
        dev = rank.device
        # Values (i mod 8191) + small constants: sums of two ranks stay far below 2^24.
        self.base = (torch.arange(n, dtype=torch.int32, device=dev) % 8191).to(torch.float32)
        self.big = torch.empty(n, dtype=torch.float32, device=dev)
        self.gbase = (torch.arange(g, dtype=torch.int32, device=dev) % 4099).to(torch.float32)
        self.static = torch.zeros(g, dtype=torch.float32, device=dev)
        self.big_want = None
        self.static_want = None
        # Warm-up outside the capture: the communicator exists and has run a collective.
        self.big.fill_(1.0)
        dist.all_reduce(self.big)
        torch.cuda.synchronize(dev)
        self.graph = capture_graph(dev, lambda: dist.all_reduce(self.static), 3,
                                   lambda: torch.cuda.synchronize(dev))
        rank.say(f"nccl: eager buffer {n * 4 // MIB} MiB, graph buffer {g * 4 // MIB} MiB captured")

    def run_round(self):
        r = self.r
        if self.big_want is not None:
            exact("nccl_eager_kept", r, self.big, self.big_want)
            exact("nccl_graph_kept", r, self.static, self.static_want)
        r.sync()
        mine, total = offsets(r, 16, 7, 0)
        torch.add(self.base, mine, out=self.big)
        dist.all_reduce(self.big)
        self.big_want = self.base * r.world + total
        torch.cuda.synchronize(r.device)
        exact("nccl_eager_allreduce", r, self.big, self.big_want)
        r.sync()
        mine, total = offsets(r, 16, 7, 5)
        self.static.copy_(self.gbase + mine)  # fresh input into the graph's static buffer
        self.graph.replay()
        self.static_want = self.gbase * r.world + total
        torch.cuda.synchronize(r.device)
        exact("nccl_graph_replay", r, self.static, self.static_want)


class SymmPart:
    """PyTorch symmetric memory: one_shot_all_reduce eager and captured in a CUDA graph."""

    def __init__(self, rank):
        self.r = rank
        dev = rank.device
        n = rank.args.symm_numel
        self.group = dist.group.WORLD.group_name
        symm_mem, (self.one_shot, self.one_shot_out) = symmetric_memory(
            self.group, "one_shot_all_reduce", "one_shot_all_reduce_out")
        self.inp = symm_mem.empty(n, dtype=torch.float32, device=dev)
        self.handle = symm_mem.rendezvous(self.inp, group=self.group)
        self.out = torch.zeros(n, dtype=torch.float32, device=dev)
        self.base = (torch.arange(n, dtype=torch.int32, device=dev) % 2039).to(torch.float32)
        self.eager_out = None
        self.out_want = None
        try:
            backend = symm_mem.get_backend(dev)
        except Exception as e:  # noqa: BLE001 - only for the log line
            backend = f"? ({type(e).__name__})"
        rank.say(f"symm: {n} float32 elements, group {self.group}, rendezvous handle "
                 f"{type(self.handle).__name__}, backend {backend}, "
                 f"multicast ptr {getattr(self.handle, 'multicast_ptr', '?')}")
        self.inp.fill_(float(rank.rank + 1))
        rank.sync()
        self.graph = capture_graph(dev, lambda: self.one_shot_out(self.inp, "sum", self.group, self.out),
                                   2, rank.sync)

    def fill(self, salt):
        """Writes this rank's fresh input; returns the exact sum over ranks."""
        mine, total = offsets(self.r, 3, 11, salt)
        self.inp.copy_(self.base + mine)
        return self.base * self.r.world + total

    def run_round(self):
        r = self.r
        if self.out_want is not None:
            exact("symm_eager_kept", r, self.eager_out, self.eager_want)
            exact("symm_graph_kept", r, self.out, self.out_want)
        r.sync()
        want = self.fill(0)
        r.sync()
        self.eager_out = self.one_shot(self.inp, "sum", self.group)
        self.eager_want = want
        r.sync()
        exact("symm_one_shot_all_reduce", r, self.eager_out, want)
        want = self.fill(2)
        r.sync()
        self.graph.replay()
        self.out_want = want
        r.sync()
        exact("symm_graph_replay", r, self.out, want)


class SymmMulticastPart:
    """PyTorch symmetric memory with multicast: multimem_all_reduce_ (in place, through the
    multicast address) eager and captured in a CUDA graph. Two symmetric buffers, so the eager
    result and the graph's result are each kept across an idle point."""

    def __init__(self, rank):
        self.r = rank
        if os.environ.get("CUSNAP_ALLOW_MULTICAST") != "1":
            # Belt and braces: rendezvous with multicast calls cuMulticastCreate (DRIVER-FACTS F9).
            raise RuntimeError("--parts symm_mc needs CUSNAP_ALLOW_MULTICAST=1 (DRIVER-FACTS F9)")
        dev = rank.device
        n = rank.args.symm_numel
        self.group = dist.group.WORLD.group_name
        symm_mem, (self.multimem,) = symmetric_memory(self.group, "multimem_all_reduce_")
        self.eager_buf = symm_mem.empty(n, dtype=torch.float32, device=dev)
        self.graph_buf = symm_mem.empty(n, dtype=torch.float32, device=dev)
        handles = [symm_mem.rendezvous(t, group=self.group) for t in (self.eager_buf, self.graph_buf)]
        ptrs = [int(getattr(hd, "multicast_ptr", 0) or 0) for hd in handles]
        rank.check("symm_mc_multicast_ptr", all(ptrs),
                   "multicast ptrs " + ", ".join(f"0x{p:x}" for p in ptrs)
                   + f" (TORCH_SYMM_MEM_DISABLE_MULTICAST={os.environ.get('TORCH_SYMM_MEM_DISABLE_MULTICAST')})")
        if not all(ptrs):
            raise RuntimeError("symmetric memory has no multicast address: multimem_all_reduce_ cannot run")
        self.base = (torch.arange(n, dtype=torch.int32, device=dev) % 2039).to(torch.float32)
        self.eager_want = None
        self.graph_want = None
        rank.say(f"symm_mc: 2 x {n} float32 elements, group {self.group}, multicast ptrs "
                 + ", ".join(f"0x{p:x}" for p in ptrs))
        self.graph_buf.fill_(float(rank.rank + 1))
        rank.sync()
        self.graph = capture_graph(dev, lambda: self.multimem(self.graph_buf, "sum", self.group), 2,
                                   rank.sync)

    def fill(self, buf, salt):
        """Writes this rank's fresh input into buf; returns the exact sum over ranks."""
        mine, total = offsets(self.r, 5, 13, salt)
        buf.copy_(self.base + mine)
        return self.base * self.r.world + total

    def run_round(self):
        r = self.r
        if self.graph_want is not None:
            exact("symm_mc_eager_kept", r, self.eager_buf, self.eager_want)
            exact("symm_mc_graph_kept", r, self.graph_buf, self.graph_want)
        r.sync()
        want = self.fill(self.eager_buf, 0)
        r.sync()
        self.multimem(self.eager_buf, "sum", self.group)
        self.eager_want = want
        r.sync()
        exact("symm_mc_multimem_all_reduce", r, self.eager_buf, want)
        want = self.fill(self.graph_buf, 4)  # fresh input into the graph's static buffer
        r.sync()
        self.graph.replay()
        self.graph_want = want
        r.sync()
        exact("symm_mc_graph_replay", r, self.graph_buf, want)


class RawMemory:
    """cudaMalloc and cudaMemcpy from the libcudart this process loaded (PyTorch's), through
    ctypes; where none can be found (a statically linked runtime), the driver API's
    cuMemAlloc / cuMemcpyHtoD / cuMemcpyDtoH in the current (primary) context instead."""

    def __init__(self):
        self.runtime = None
        try:
            with open("/proc/self/maps") as maps:
                paths = sorted({line.split()[-1] for line in maps if "libcudart.so" in line})
        except OSError:
            paths = []
        for path in paths + ["libcudart.so.13", "libcudart.so.12"]:
            try:
                lib = ctypes.CDLL(path)
                lib.cudaMalloc.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_size_t]
                lib.cudaMemcpy.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
                self.runtime, self.name = lib, f"cudaMalloc ({path})"
                return
            except (OSError, AttributeError):
                continue
        lib = ctypes.CDLL("libcuda.so.1")
        lib.cuMemAlloc_v2.argtypes = [ctypes.POINTER(ctypes.c_uint64), ctypes.c_size_t]
        lib.cuMemcpyHtoD_v2.argtypes = [ctypes.c_uint64, ctypes.c_void_p, ctypes.c_size_t]
        lib.cuMemcpyDtoH_v2.argtypes = [ctypes.c_void_p, ctypes.c_uint64, ctypes.c_size_t]
        self.driver, self.name = lib, "cuMemAlloc (no libcudart found in this process)"

    def malloc(self, nbytes):
        if self.runtime is not None:
            ptr = ctypes.c_void_p()
            rc = self.runtime.cudaMalloc(ctypes.byref(ptr), nbytes)
            value = ptr.value
        else:
            ptr = ctypes.c_uint64()
            rc = self.driver.cuMemAlloc_v2(ctypes.byref(ptr), nbytes)
            value = ptr.value
        if rc != 0:
            raise RuntimeError(f"{self.name}: allocating {nbytes} bytes returned {rc}")
        return value

    def to_device(self, pointer, data):
        rc = (self.runtime.cudaMemcpy(pointer, data, len(data), 1) if self.runtime is not None
              else self.driver.cuMemcpyHtoD_v2(pointer, data, len(data)))
        if rc != 0:
            raise RuntimeError(f"copying {len(data)} bytes to the device returned {rc}")

    def from_device(self, pointer, nbytes):
        buf = ctypes.create_string_buffer(nbytes)
        rc = (self.runtime.cudaMemcpy(ctypes.addressof(buf), pointer, nbytes, 2) if self.runtime is not None
              else self.driver.cuMemcpyDtoH_v2(ctypes.addressof(buf), pointer, nbytes))
        if rc != 0:
            raise RuntimeError(f"copying {nbytes} bytes from the device returned {rc}")
        return buf.raw


class PrivatePart:
    """Private (never shared) GPU memory whose bytes must come back unchanged."""

    def __init__(self, rank):
        self.r = rank
        dev = rank.device
        mib = rank.args.private_mib
        gen = torch.Generator(device=dev)
        gen.manual_seed(1234 + rank.rank)
        # Caching-allocator tensors of three dtypes.
        self.tensors = {
            "tensor_int64": torch.randint(-2**62, 2**62, (mib * MIB // 16,), dtype=torch.int64,
                                          device=dev, generator=gen),
            "tensor_float32": torch.rand(mib * MIB // 16, dtype=torch.float32, device=dev, generator=gen),
            "tensor_uint8": torch.randint(0, 256, (mib * MIB // 4,), dtype=torch.uint8, device=dev,
                                          generator=gen),
        }
        self.memory = RawMemory()
        self.raw = {}  # name -> (pointer, bytes, digest)
        nbytes = max(MIB, mib * MIB // 8)
        block = torch.cuda.caching_allocator_alloc(nbytes, device=rank.local_rank)
        self.raw["caching_allocator_alloc"] = self.fill_raw(block, nbytes, 1)
        self.raw["cudaMalloc"] = self.fill_raw(self.memory.malloc(nbytes), nbytes, 2)
        torch.cuda.synchronize(dev)
        self.digests = {name: self.digest_tensor(t) for name, t in self.tensors.items()}
        total = sum(t.numel() * t.element_size() for t in self.tensors.values()) + 2 * nbytes
        rank.say(f"private: {total // MIB} MiB in {len(self.tensors)} tensors, a caching_allocator_alloc "
                 f"block and a block from {self.memory.name}; "
                 + ", ".join(f"{k} sha256 {v[:16]}" for k, v in self.digests.items()))

    def fill_raw(self, pointer, nbytes, salt):
        data = random.Random(977 * (self.r.rank + 1) + salt).randbytes(nbytes)
        self.memory.to_device(pointer, data)
        return pointer, nbytes, hashlib.sha256(data).hexdigest()

    @staticmethod
    def digest_tensor(t):
        host = t.cpu().contiguous()
        return hashlib.sha256(ctypes.string_at(host.data_ptr(), host.numel() * host.element_size())).hexdigest()

    def run_round(self):
        r = self.r
        torch.cuda.synchronize(r.device)
        for name, t in self.tensors.items():
            now = self.digest_tensor(t)
            r.check(f"private_{name}", now == self.digests[name], f"sha256 {now[:16]} (start {self.digests[name][:16]})")
        for name, (pointer, nbytes, digest) in self.raw.items():
            now = hashlib.sha256(self.memory.from_device(pointer, nbytes)).hexdigest()
            r.check(f"private_{name}", now == digest, f"{nbytes} bytes at 0x{pointer:x}, sha256 {now[:16]} "
                                                     f"(start {digest[:16]})")


def wait_for_go(rank, control, k, timeout_s):
    """Idles (no CUDA call) until <control>/go-<k> exists; fails after timeout_s."""
    path = os.path.join(control, f"go-{k}")
    deadline = time.monotonic() + timeout_s
    while not os.path.exists(path):
        if time.monotonic() > deadline:
            raise TimeoutError(f"rank {rank.rank}: {path} did not appear within {timeout_s} s")
        time.sleep(0.05)


def main():
    # SIGUSR1 prints every thread's Python stack: the harness sends it before killing a rank
    # that does not exit, so a hang says where it waits.
    faulthandler.register(signal.SIGUSR1, all_threads=True)
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--parts", default="nccl", help="comma list of nccl, symm, symm_mc, private")
    parser.add_argument("--cycles", type=int, default=1, help="idle points (one checkpoint each)")
    parser.add_argument("--control", default=os.environ.get("WORKLOAD_CONTROL_DIR"),
                        help="folder of the go-<k> files (default $WORKLOAD_CONTROL_DIR)")
    parser.add_argument("--allreduce-mib", type=int, default=256)
    parser.add_argument("--graph-mib", type=int, default=64)
    parser.add_argument("--symm-numel", type=int, default=1 << 20)
    parser.add_argument("--private-mib", type=int, default=256)
    parser.add_argument("--keep-graphs", action="store_true",
                        help="keep the CUDA graphs alive at destroy_process_group (NCCL then waits forever)")
    parser.add_argument("--wait-s", type=float, default=600.0, help="longest idle wait")
    parser.add_argument("--pg-timeout-s", type=float, default=0.0,
                        help="init_process_group timeout (collectives and the store; 0: PyTorch's default)")
    args = parser.parse_args()
    parts = [p for p in args.parts.split(",") if p]
    unknown = set(parts) - {"nccl", "symm", "symm_mc", "private"}
    if unknown or not parts:
        parser.error(f"--parts: unknown or empty: {args.parts}")
    if args.cycles > 0 and not args.control:
        parser.error("--control (or WORKLOAD_CONTROL_DIR) is needed to idle between steps")

    rank = Rank(args)
    torch.cuda.set_device(rank.device)
    timeout = {"timeout": datetime.timedelta(seconds=args.pg_timeout_s)} if args.pg_timeout_s > 0 else {}
    if "nccl" in parts:
        dist.init_process_group("nccl", rank=rank.rank, world_size=rank.world, device_id=rank.device,
                                **timeout)
    else:
        dist.init_process_group("gloo", rank=rank.rank, world_size=rank.world, **timeout)
    rank.say(f"pid={os.getpid()} start: torch {torch.__version__}, cuda {torch.version.cuda}, "
             f"device {rank.device} ({torch.cuda.get_device_name(rank.device)}), "
             f"backend {dist.get_backend()}, parts {','.join(parts)}, cycles {args.cycles}")
    ok = False
    try:
        built = []
        for part in parts:  # private first or last makes no difference; keep the given order
            built.append({"nccl": NcclPart, "symm": SymmPart, "symm_mc": SymmMulticastPart,
                          "private": PrivatePart}[part](rank))
        for k in range(args.cycles + 1):
            rank.round = k
            if k > 0:
                torch.cuda.synchronize(rank.device)
                rank.say(f"pid={os.getpid()} READY {k}")
                wait_for_go(rank, args.control, k, args.wait_s)
            for part in built:
                part.run_round()
        dist.barrier()
        ok = rank.failed == 0
    except Exception as e:  # noqa: BLE001 - printed whole, then the rank fails
        traceback.print_exc()
        rank.say(f"ERROR {type(e).__name__}: {e}")
    rank.say(f"DONE {'PASS' if ok else 'FAIL'} ({rank.failed} failed checks)")
    if ok:
        # NCCL's communicator teardown (ncclCommFinalize -> commDestroySync) waits until every
        # CUDA graph that captured one of its collectives is destroyed: a graph still alive
        # here makes destroy_process_group() wait forever, with or without a checkpoint
        # (--keep-graphs shows it). So the graphs go first, as in any job that ends cleanly.
        if not args.keep_graphs:
            for part in built:
                part.graph = None  # the part's CUDAGraph: its only reference
            gc.collect()
            torch.cuda.synchronize(rank.device)
        dist.destroy_process_group()
    sys.stdout.flush()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
