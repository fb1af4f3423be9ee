"""The job of tests/gpu/test_torch_ipc.py (a producer process passes CUDA tensors to a
consumer through torch.multiprocessing). An ordinary PyTorch script: it knows
nothing of cusnap; under `cusnap run` its cudaMalloc memory is served by the shim and its
legacy CUDA IPC (cudaIpcGetMemHandle / cudaIpcOpenMemHandle, what torch.multiprocessing uses
for CUDA tensors) goes over the producer's endpoint.

    [cusnap run --] python3 torch_ipc_job.py --control <folder> [--cycles 2] [--mib 64]
                                             [--allocator default|expandable]

The producer (this process) allocates CUDA tensors on --device with the default caching
allocator (PYTORCH_CUDA_ALLOC_CONF=expandable_segments:False is set when the variable is
unset, and the producer refuses expandable segments), fills them with known patterns, starts
the consumer with the torch.multiprocessing "spawn" context and passes the tensors through a
Queue. Tensors: "large" (--mib MiB of int32, a cudaMalloc segment of its own), "medium"
(3 MiB + 4 KiB of float32, in a 20 MiB segment of the large pool), "small_a" (4000 bytes of
int64) and "small_b" (4000 bytes of uint8), allocated one after the other in the small pool
(usually one 2 MiB segment, small_b at a non-zero offset in it: torch shares the segment's
handle plus an offset). With --allocator expandable the producer runs with
PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True instead (the caller sets it; the producer
refuses to run without it): its tensors are in VMM segments that torch.multiprocessing
shares by POSIX file descriptor.

Rounds: in round k (0 first, then k = 1..--cycles, each after the producer saw the file
<control>/go-<k>), in this order, every step after the previous one finished
(torch.cuda.synchronize, then a Queue message):
  1. the producer checks the values the tensors should hold (round 0: its initial pattern;
     round k: what it wrote in round k-1, kept across the checkpoint) -> CHECK producer_kept_*
  2. the consumer checks the same through its IPC mappings -> CHECK consumer_kept_*
  3. the consumer writes a fresh pattern into every shared tensor
  4. the producer reads it -> CHECK producer_reads_consumer_*, then writes another pattern
  5. the consumer reads that -> CHECK consumer_reads_producer_*
Then both idle (no CUDA call: the producer polls the go file, the consumer blocks on its
Queue) after printing "TI role=<role> pid=<pid> READY <k+1>". Every check prints
"TI role=<role> round=<k> CHECK <name> PASS|FAIL <detail>"; values are exact (integers, and
float32 below 2^24). After the last round the consumer releases its tensors and exits, the
producer joins it (CHECK producer_consumer_exit) and each prints "TI role=<role> DONE
PASS|FAIL"; exit status 0 only when every check of both passed.

Without torch, or without a GPU torch can use, it prints "SKIP: <why>" and exits 77.
Every wait is bounded by --wait-s.
"""

import argparse
import faulthandler
import gc
import os
import queue
import signal
import sys
import time
import traceback

try:
    import torch
    import torch.multiprocessing as tmp
except ImportError as e:  # the job says SKIP (77) in main()
    torch = None
    IMPORT_ERROR = f"{type(e).__name__}: {e}"
else:
    IMPORT_ERROR = ""

from job_lines import JobLines

MIB = 1 << 20
SKIP_STATUS = 77

# (name, dtype name, element count for --mib M); allocated in this order, one after the other.
TENSORS = (
    ("large", "int32", lambda mib: mib * MIB // 4),
    ("medium", "float32", lambda mib: (3 * MIB + 4096) // 4),
    ("small_a", "int64", lambda mib: 500),
    ("small_b", "uint8", lambda mib: 4000),
)
# Values stay exact in each dtype: int32 below 2^31, float32 below 2^24, uint8 below 2^8.
MODULUS = {"int32": 2147483629, "float32": 16777213, "int64": 2305843009213693951, "uint8": 251}

INITIAL_SALT = 1


def producer_salt(k):
    return 1000 + k


def consumer_salt(k):
    return 2000 + k


class Role(JobLines):
    """One side of the job: its name, round, check counting and protocol lines (both
    processes share one stdout: JobLines)."""

    def __init__(self, name):
        self.name = name
        super().__init__(f"TI role={name}")

    def check(self, name, ok, detail=""):
        super().check(f"{self.name}_{name}", ok, detail)

    def check_all(self, what, tensors, salt):
        """Every tensor holds pattern(salt) exactly (one CHECK per tensor)."""
        torch.cuda.synchronize()
        for index, (name, t) in enumerate(tensors.items()):
            want = pattern(t, salt, index)
            ok = torch.equal(t, want)
            detail = f"{t.numel()} {str(t.dtype).replace('torch.', '')} at 0x{t.data_ptr():x}"
            if not ok:
                diff = torch.nonzero(t.view(-1) != want.view(-1))
                if diff.numel():
                    i = int(diff[0].item())
                    detail += (f"; {diff.numel()} differ, first at {i}: {t.view(-1)[i].item()} != "
                               f"{want.view(-1)[i].item()}")
            self.check(f"{what}_{name}", ok, detail)


def pattern(t, salt, index):
    """The values a tensor like `t` holds for (salt, tensor index): a hash of the element
    index, exact in t's dtype; computed on t's device."""
    dtype = str(t.dtype).replace("torch.", "")
    i = torch.arange(t.numel(), dtype=torch.int64, device=t.device)
    values = (i * 2654435761 + (salt * 16 + index) * 97531) % MODULUS[dtype]
    return values.to(t.dtype).view(t.shape)


def write_all(tensors, salt):
    for index, t in enumerate(tensors.values()):
        t.copy_(pattern(t, salt, index))
    torch.cuda.synchronize()


def receive(box, want, role, deadline, peer=None):
    """The next message from `box`; it must be a tuple whose first item is `want` (an "error"
    message from the other side fails with its text). Fails at `deadline` or, when `peer`
    (the consumer's Process) is given, as soon as the peer exited."""
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError(f"{role.name}: no '{want}' message before the deadline")
        try:
            message = box.get(timeout=min(left, 2.0))
        except queue.Empty:
            if peer is not None and not peer.is_alive():
                raise RuntimeError(f"{role.name}: the consumer exited (status {peer.exitcode}) "
                                   f"before sending '{want}'") from None
            continue
        if message[0] == "error":
            raise RuntimeError(f"{role.name}: the other side failed: {message[1]}")
        if message[0] != want:
            raise RuntimeError(f"{role.name}: expected '{want}', got {message[0]!r}")
        return message


def wait_for_go(role, control, k, deadline):
    """Idles (no CUDA call) until <control>/go-<k> exists."""
    path = os.path.join(control, f"go-{k}")
    while not os.path.exists(path):
        if time.monotonic() > deadline:
            raise TimeoutError(f"{role.name}: {path} did not appear in time")
        time.sleep(0.05)


def describe(tensors):
    return ", ".join(f"{name} {t.numel()} x {str(t.dtype).replace('torch.', '')} at 0x{t.data_ptr():x}"
                     for name, t in tensors.items())


# ---- the consumer (a spawned process: a module-level function, so spawn can find it) ---------

def consumer_main(inbox, outbox, options):
    faulthandler.register(signal.SIGUSR1, all_threads=True)
    role = Role("consumer")
    ok = False
    try:
        torch.cuda.set_device(options["device"])
        deadline = time.monotonic() + options["wait_s"]
        message = receive(inbox, "tensors", role, deadline)
        tensors = message[1]
        del message
        role.say(f"pid={os.getpid()} start: torch {torch.__version__}, received {len(tensors)} CUDA tensors: "
                 f"{describe(tensors)}")
        expected = INITIAL_SALT
        for k in range(options["cycles"] + 1):
            role.round = k
            # The producer sends "round" after its go file and its own check of the kept values.
            receive(inbox, "round", role, time.monotonic() + options["wait_s"])
            role.check_all("kept", tensors, expected)
            write_all(tensors, consumer_salt(k))
            outbox.put(("wrote", k))
            receive(inbox, "check", role, time.monotonic() + options["wait_s"])
            role.check_all("reads_producer", tensors, producer_salt(k))
            expected = producer_salt(k)
            torch.cuda.synchronize()
            if k < options["cycles"]:
                role.say(f"pid={os.getpid()} READY {k + 1}")
            outbox.put(("idle", k))
        # Release the IPC mappings before the producer frees the memory (torch's rule).
        del tensors
        gc.collect()
        torch.cuda.synchronize()
        ok = role.failed == 0
        outbox.put(("released", role.failed))
    except Exception as e:  # noqa: BLE001 - printed whole, then the consumer fails
        traceback.print_exc()
        role.say(f"ERROR {type(e).__name__}: {e}")
        try:
            outbox.put(("error", f"consumer: {type(e).__name__}: {e}"))
        except Exception:  # noqa: BLE001 - the queue itself may be what failed
            pass
    role.say(f"DONE {'PASS' if ok else 'FAIL'} ({role.failed} failed checks)")
    outbox.close()
    outbox.join_thread()  # the last message is in the pipe before the exit
    sys.exit(0 if ok else 1)


# ---- the producer (the job's root) -------------------------------------------------------------

def skip(text):
    print(f"SKIP: {text}", flush=True)
    return SKIP_STATUS


def main():
    faulthandler.register(signal.SIGUSR1, all_threads=True)
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--control", required=True, help="folder of the go-<k> files")
    parser.add_argument("--cycles", type=int, default=2, help="idle points (one checkpoint each)")
    parser.add_argument("--mib", type=int, default=64, help="size of the large tensor")
    parser.add_argument("--device", type=int, default=0)
    parser.add_argument("--wait-s", type=float, default=600.0, help="longest wait for a go file or a message")
    parser.add_argument("--allocator", choices=("default", "expandable"), default="default",
                        help="the caching allocator the job is about (PYTORCH_CUDA_ALLOC_CONF must say so)")
    args = parser.parse_args()
    if torch is None:
        return skip(f"torch cannot be imported ({IMPORT_ERROR})")
    if not torch.cuda.is_available():
        return skip(f"torch {torch.__version__} sees no CUDA GPU")
    conf = os.environ.get("PYTORCH_CUDA_ALLOC_CONF", "")
    expandable = "expandable_segments:true" in conf.replace(" ", "").lower()
    if expandable != (args.allocator == "expandable"):
        print(f"PYTORCH_CUDA_ALLOC_CONF={conf or '(unset)'}: this job is about the "
              f"{args.allocator} allocator ({'expandable segments' if args.allocator == 'expandable' else 'cudaMalloc segments'})",
              flush=True)
        return 2

    role = Role("producer")
    torch.cuda.set_device(args.device)
    device = torch.device("cuda", args.device)
    tensors = {name: torch.empty(count(args.mib), dtype=getattr(torch, dtype), device=device)
               for name, dtype, count in TENSORS}
    write_all(tensors, INITIAL_SALT)
    shared = sum(t.numel() * t.element_size() for t in tensors.values())
    role.say(f"pid={os.getpid()} start: torch {torch.__version__}, cuda {torch.version.cuda}, device "
             f"{device} ({torch.cuda.get_device_name(device)}), PYTORCH_CUDA_ALLOC_CONF={conf or '(unset)'}, "
             f"shared_bytes={shared}, cycles {args.cycles}; tensors: {describe(tensors)}")

    ctx = tmp.get_context("spawn")
    to_consumer = ctx.Queue()
    to_producer = ctx.Queue()
    options = {"device": args.device, "cycles": args.cycles, "wait_s": args.wait_s}
    consumer = ctx.Process(target=consumer_main, args=(to_consumer, to_producer, options),
                           name="torch-ipc-consumer")
    ok = False
    try:
        consumer.start()
        role.say(f"consumer started: pid {consumer.pid}")
        to_consumer.put(("tensors", tensors))
        expected = INITIAL_SALT
        for k in range(args.cycles + 1):
            role.round = k
            if k > 0:
                wait_for_go(role, args.control, k, time.monotonic() + args.wait_s)
            role.check_all("kept", tensors, expected)
            to_consumer.put(("round", k))
            receive(to_producer, "wrote", role, time.monotonic() + args.wait_s, consumer)
            role.check_all("reads_consumer", tensors, consumer_salt(k))
            write_all(tensors, producer_salt(k))
            to_consumer.put(("check", k))
            receive(to_producer, "idle", role, time.monotonic() + args.wait_s, consumer)
            expected = producer_salt(k)
            torch.cuda.synchronize()
            if k < args.cycles:
                role.say(f"pid={os.getpid()} READY {k + 1}")
        released = receive(to_producer, "released", role, time.monotonic() + args.wait_s, consumer)
        consumer.join(timeout=args.wait_s)
        role.round = args.cycles
        role.check("consumer_exit", consumer.exitcode == 0,
                   f"exit status {consumer.exitcode}, {released[1]} failed checks in the consumer")
        torch.cuda.ipc_collect()
        ok = role.failed == 0
    except Exception as e:  # noqa: BLE001 - printed whole, then the producer fails
        traceback.print_exc()
        role.say(f"ERROR {type(e).__name__}: {e}")
    finally:
        if consumer.is_alive():
            consumer.join(timeout=5)
        if consumer.is_alive():
            role.say(f"killing the consumer (pid {consumer.pid}): it did not exit")
            consumer.kill()
            consumer.join(timeout=30)
    role.say(f"DONE {'PASS' if ok else 'FAIL'} ({role.failed} failed checks)")
    sys.stdout.flush()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
