#!/usr/bin/env python3
"""The shim's running cost on a real PyTorch job (issue 15, docs/MEASURED.md M14): the same
child process run plainly and under `cusnap run` (libcusnap.so preloaded), in one command.

Two kinds of child, each run --repeats times per variant (plain and shim alternating, so that
drift of the machine falls on both):

  train    a small PyTorch training loop on GPU 0 of CUDA_VISIBLE_DEVICES, fixed seed, the
           default caching allocator: "mlp" (8 x Linear(1024, 1024) + GELU, batch 256: many
           small kernels, bound by launch cost) and "transformer" (2 x TransformerEncoderLayer,
           d_model 1024, 16 heads, batch 8 x 512 tokens, dropout 0), AdamW; --warmup steps, then
           --steps steps each timed with torch.cuda.synchronize() (median, p90), then --steps
           steps back to back (one synchronize at the end: the loop's time per step). The final
           loss is compared between plain and shim (same bits expected: the shim changes no
           result).
  malloc   cudaMalloc / cudaFree latency of --malloc-sizes: the libcudart torch loaded, called
           through ctypes (cuMemAlloc / cuMemFree of libcuda when no libcudart is found), each
           call timed alone; and torch.empty + del of the same sizes with
           PYTORCH_NO_CUDA_MEMORY_CACHING=1 (every tensor a cudaMalloc and a cudaFree). Under
           the shim every cudaMalloc is served by a VMM allocation of its own (issue 14).

Every child runs with a timeout (--child-timeout-s, and the whole command within --budget-s):
a child that does not finish is killed with its process group and named
("SHIM OVERHEAD TIMEOUT: ..."); its output goes to a file, so nothing waits on a pipe. One
"SHIM RUN" line per child, "SHIM RATIO" lines (shim / plain, medians over the repeats of each
child's median), and last one summary line starting "SHIM OVERHEAD:".

    bench/gpu_shim_overhead.py --build <gpu build> [--repeats 3] [--steps 100] [--warmup 20]
        [--malloc-sizes 4K,2M,64M,1G] [--malloc-reps 30] [--child-timeout-s 180] [--budget-s 360]

<gpu build>: bin/cusnap and lib/libcusnap.so (a Release build: a sanitized shim cannot enter
python3). Exit status 0 when every child finished, 1 when one failed or timed out, 77
(printing "SKIP: ...") without torch, without a GPU torch can use, or with CUSNAP_GPU_SIM=1.
"""

import argparse
import ctypes
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# The GPU tests' harness walks a process tree the same way a timed-out child is killed here.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "gpu"))
from gpu_harness import descendants  # noqa: E402

NO_MULTICAST = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}
SKIP_STATUS = 77
CHILD_TAG = "SHIM CHILD "
MODELS = ("mlp", "transformer")
# The granularity-rounding probe of the malloc child: this many raw allocations of this many
# bytes held at once.
SMALL_COUNT = 256
SMALL_BYTES = 4096


def log(text):
    print(text, flush=True)


def parse_size(text):
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    text = text.strip()
    return int(text[:-1]) * units[text[-1].upper()] if text[-1].upper() in units else int(text)


def size_name(n):
    for unit, shift in (("G", 30), ("M", 20), ("K", 10)):
        if n >= 1 << shift and n % (1 << shift) == 0:
            return f"{n >> shift}{unit}"
    return str(n)


def median(values):
    return statistics.median(values) if values else float("nan")


def p90(values):
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(0.9 * len(ordered)))] if ordered else float("nan")


# ---- the children (run as `gpu_shim_overhead.py --child <kind>`) -------------------------------

def shim_loaded():
    try:
        with open("/proc/self/maps") as maps:
            return any("libcusnap" in line for line in maps)
    except OSError:
        return False


def child_probe(args):
    try:
        import torch
    except ImportError as e:
        print(f"SKIP: torch cannot be imported ({type(e).__name__}: {e})", flush=True)
        return SKIP_STATUS
    if not torch.cuda.is_available():
        print(f"SKIP: torch {torch.__version__} sees no CUDA GPU", flush=True)
        return SKIP_STATUS
    dev = torch.device("cuda", 0)
    report = {"torch": torch.__version__, "cuda": torch.version.cuda, "gpu": torch.cuda.get_device_name(dev),
              "gpus": torch.cuda.device_count()}
    print(CHILD_TAG + json.dumps(report), flush=True)
    return 0


def child_train(args):
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    dev = torch.device("cuda", 0)
    began = time.perf_counter()
    torch.zeros(1, device=dev)
    torch.cuda.synchronize(dev)
    report = {"init_s": time.perf_counter() - began, "shim": shim_loaded(), "models": {}}

    for name in MODELS:
        torch.manual_seed(0)
        torch.cuda.manual_seed_all(0)
        if name == "mlp":
            layers = []
            for _ in range(8):
                layers += [nn.Linear(1024, 1024), nn.GELU()]
            model = nn.Sequential(*layers, nn.Linear(1024, 16)).to(dev)
            x = torch.randn(256, 1024, device=dev)
            y = torch.randint(0, 16, (256,), device=dev)

            def loss_of():
                return F.cross_entropy(model(x), y)
        else:
            layer = nn.TransformerEncoderLayer(d_model=1024, nhead=16, dim_feedforward=4096, dropout=0.0,
                                               batch_first=True)
            model = nn.TransformerEncoder(layer, num_layers=2, enable_nested_tensor=False).to(dev)
            x = torch.randn(8, 512, 1024, device=dev)

            def loss_of():
                return model(x).square().mean()
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4)

        def step():
            opt.zero_grad(set_to_none=True)
            loss = loss_of()
            loss.backward()
            opt.step()
            return loss

        for _ in range(args.warmup):
            step()
        torch.cuda.synchronize(dev)
        times = []
        for _ in range(args.steps):
            t0 = time.perf_counter()
            step()
            torch.cuda.synchronize(dev)
            times.append((time.perf_counter() - t0) * 1e3)
        t0 = time.perf_counter()
        for _ in range(args.steps):
            loss = step()
        torch.cuda.synchronize(dev)
        loop_ms = (time.perf_counter() - t0) * 1e3 / args.steps
        report["models"][name] = {"step_ms_median": median(times), "step_ms_p90": p90(times),
                                  "step_ms_min": min(times), "loop_ms_per_step": loop_ms,
                                  "final_loss": float(loss.item()).hex(),
                                  "params": sum(p.numel() for p in model.parameters())}
        del model, opt, x
    report["max_reserved_bytes"] = torch.cuda.max_memory_reserved(dev)
    # Device memory in use while the caching allocator still holds its segments (issue 14:
    # what serving cudaMalloc by granularity-rounded VMM allocations costs on a real job).
    free_bytes, total_bytes = torch.cuda.mem_get_info(dev)
    report["device_used_bytes"] = total_bytes - free_bytes
    report["reserved_bytes"] = torch.cuda.memory_reserved(dev)
    print(CHILD_TAG + json.dumps(report), flush=True)
    return 0


class RawMalloc:
    """cudaMalloc / cudaFree of the libcudart this process loaded (torch's), else the driver's
    cuMemAlloc_v2 / cuMemFree_v2 in the current context."""

    def __init__(self):
        try:
            with open("/proc/self/maps") as maps:
                paths = sorted({line.split()[-1] for line in maps if "libcudart.so" in line})
        except OSError:
            paths = []
        for path in paths:
            try:
                lib = ctypes.CDLL(path)
                lib.cudaMalloc.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_size_t]
                lib.cudaFree.argtypes = [ctypes.c_void_p]
                self.lib, self.runtime, self.name = lib, True, f"cudaMalloc/cudaFree ({os.path.basename(path)})"
                return
            except (OSError, AttributeError):
                continue
        lib = ctypes.CDLL("libcuda.so.1")
        lib.cuMemAlloc_v2.argtypes = [ctypes.POINTER(ctypes.c_uint64), ctypes.c_size_t]
        lib.cuMemFree_v2.argtypes = [ctypes.c_uint64]
        self.lib, self.runtime, self.name = lib, False, "cuMemAlloc/cuMemFree (no libcudart in this process)"

    def alloc_free(self, nbytes):
        """(alloc seconds, free seconds) of one allocation of `nbytes`."""
        if self.runtime:
            ptr = ctypes.c_void_p()
            t0 = time.perf_counter()
            rc = self.lib.cudaMalloc(ctypes.byref(ptr), nbytes)
            t1 = time.perf_counter()
            if rc != 0:
                raise RuntimeError(f"{self.name}: cudaMalloc({nbytes}) returned {rc}")
            rc = self.lib.cudaFree(ptr)
        else:
            ptr = ctypes.c_uint64()
            t0 = time.perf_counter()
            rc = self.lib.cuMemAlloc_v2(ctypes.byref(ptr), nbytes)
            t1 = time.perf_counter()
            if rc != 0:
                raise RuntimeError(f"{self.name}: cuMemAlloc({nbytes}) returned {rc}")
            rc = self.lib.cuMemFree_v2(ptr)
        t2 = time.perf_counter()
        if rc != 0:
            raise RuntimeError(f"{self.name}: free of {nbytes} bytes returned {rc}")
        return t1 - t0, t2 - t1


def child_malloc(args):
    import torch

    dev = torch.device("cuda", 0)
    began = time.perf_counter()
    torch.zeros(1, device=dev)
    torch.cuda.synchronize(dev)
    report = {"init_s": time.perf_counter() - began, "shim": shim_loaded(),
              "no_caching": os.environ.get("PYTORCH_NO_CUDA_MEMORY_CACHING"), "sizes": {}}
    raw = RawMalloc()
    report["api"] = raw.name
    warm = 3
    for size in [parse_size(s) for s in args.malloc_sizes.split(",") if s]:
        alloc, free, t_alloc, t_free = [], [], [], []
        for rep in range(warm + args.malloc_reps):
            a, f = raw.alloc_free(size)
            t0 = time.perf_counter()
            x = torch.empty(size, dtype=torch.uint8, device=dev)
            t1 = time.perf_counter()
            del x
            t2 = time.perf_counter()
            if rep >= warm:
                alloc.append(a * 1e6)
                free.append(f * 1e6)
                t_alloc.append((t1 - t0) * 1e6)
                t_free.append((t2 - t1) * 1e6)
        report["sizes"][size_name(size)] = {
            "malloc_us": median(alloc), "malloc_us_p90": p90(alloc), "free_us": median(free),
            "free_us_p90": p90(free), "torch_empty_us": median(t_alloc), "torch_del_us": median(t_free)}
    # The worst case of granularity rounding: many small raw allocations held at once (the
    # driver packs them; the shim gives each its own VMM allocation). Device memory in use
    # before and while SMALL_COUNT of SMALL_BYTES are held.
    torch.cuda.synchronize(dev)
    before = torch.cuda.mem_get_info(dev)[0]
    held = []
    for _ in range(SMALL_COUNT):
        ptr = ctypes.c_void_p() if raw.runtime else ctypes.c_uint64()
        alloc = raw.lib.cudaMalloc if raw.runtime else raw.lib.cuMemAlloc_v2
        if alloc(ctypes.byref(ptr), SMALL_BYTES) != 0:
            break
        held.append(ptr)
    report["small_held"] = len(held)
    report["small_device_bytes"] = before - torch.cuda.mem_get_info(dev)[0]
    for ptr in held:
        (raw.lib.cudaFree if raw.runtime else raw.lib.cuMemFree_v2)(ptr)
    print(CHILD_TAG + json.dumps(report), flush=True)
    return 0


# ---- the parent ----------------------------------------------------------------------------------

class Runner:
    def __init__(self, args):
        self.args = args
        self.build = Path(args.build).resolve()
        self.script = str(Path(__file__).resolve())
        self.deadline = time.monotonic() + args.budget_s
        self.failures = []   # "<what>: <why>"
        self.timeouts = []
        self.not_run = 0
        self.control = tempfile.mkdtemp(prefix="cusnap-overhead-")
        os.chmod(self.control, 0o700)
        base = dict(os.environ)
        base.update(NO_MULTICAST)
        base.setdefault("CUDA_DEVICE_ORDER", "PCI_BUS_ID")
        base.pop("LD_PRELOAD", None)
        base["PYTHONUNBUFFERED"] = "1"
        self.base_env = base

    def command(self, kind, variant):
        child = [sys.executable, self.script, "--child", kind, "--steps", str(self.args.steps),
                 "--warmup", str(self.args.warmup), "--malloc-sizes", self.args.malloc_sizes,
                 "--malloc-reps", str(self.args.malloc_reps)]
        if variant == "shim":
            return [str(self.build / "bin" / "cusnap"), "run", "--"] + child
        return child

    def env(self, kind, variant):
        env = dict(self.base_env)
        if variant == "shim":
            env["CUSNAP_CONTROL_DIR"] = self.control
        if kind == "malloc":
            env["PYTORCH_NO_CUDA_MEMORY_CACHING"] = "1"
        else:
            env.pop("PYTORCH_NO_CUDA_MEMORY_CACHING", None)
        return env

    def run(self, kind, variant, label):
        """Runs one child under a timeout; returns (exit status or None on timeout, its report
        dict or None, its output)."""
        left = self.deadline - time.monotonic()
        limit = min(self.args.child_timeout_s, left - 5)
        if limit < 20:
            self.not_run += 1
            log(f"SHIM RUN {label}: not run, the budget (--budget-s {self.args.budget_s}) is used up")
            return None, None, ""
        command = self.command(kind, variant)
        with tempfile.TemporaryFile(mode="w+", prefix="cusnap-overhead-out-") as out:
            began = time.monotonic()
            proc = subprocess.Popen(command, env=self.env(kind, variant), stdin=subprocess.DEVNULL,
                                    stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
            try:
                status = proc.wait(timeout=limit)
            except subprocess.TimeoutExpired:
                status = None
                log(f"SHIM OVERHEAD TIMEOUT: {label} did not finish within {limit:.0f} s; killing pid {proc.pid} "
                    f"and its process group: {' '.join(command)}")
                self.timeouts.append(label)
                self.kill(proc)
            took = time.monotonic() - began
            out.seek(0)
            output = out.read()
        report = None
        for line in output.splitlines():
            if line.startswith(CHILD_TAG):
                try:
                    report = json.loads(line[len(CHILD_TAG):])
                except ValueError:
                    pass
        if status not in (0, None) or (status == 0 and report is None):
            if status != SKIP_STATUS:
                self.failures.append(f"{label}: exit status {status}")
            log(f"SHIM RUN {label}: exit status {status} after {took:.1f} s; last lines of its output:")
            for line in output.splitlines()[-30:]:
                log(f"    | {line}")
        elif status is None:
            log(f"SHIM RUN {label}: timed out after {took:.1f} s; last lines of its output:")
            for line in output.splitlines()[-30:]:
                log(f"    | {line}")
        else:
            log(f"SHIM RUN {label}: {took:.1f} s")
        return status, report, output

    @staticmethod
    def kill(proc):
        below = descendants(proc.pid)
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except OSError:
            pass
        for pid in below + [proc.pid]:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            log(f"SHIM OVERHEAD TIMEOUT: pid {proc.pid} did not go away after SIGKILL (left behind)")


def ratio_text(plain, shim, unit, digits=3):
    if not plain or not shim or plain != plain or shim != shim:
        return f"- / - {unit}"
    return f"{plain:.{digits}f} / {shim:.{digits}f} {unit} = {shim / plain:.3f}x"


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--build", help="the GPU build (bin/cusnap, lib/libcusnap.so)")
    parser.add_argument("--repeats", type=int, default=3, help="children per kind and variant")
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--malloc-sizes", default="4K,2M,64M,1G")
    parser.add_argument("--malloc-reps", type=int, default=30)
    parser.add_argument("--child-timeout-s", type=float, default=180.0)
    parser.add_argument("--budget-s", type=float, default=360.0, help="the whole command")
    parser.add_argument("--child", choices=("probe", "train", "malloc"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        return {"probe": child_probe, "train": child_train, "malloc": child_malloc}[args.child](args)
    if not args.build:
        parser.error("--build is required")
    if os.environ.get("CUSNAP_GPU_SIM") == "1":
        log("SKIP: PyTorch needs a real GPU (CUSNAP_GPU_SIM=1)")
        log("SHIM OVERHEAD: not measured (CUSNAP_GPU_SIM=1)")
        return SKIP_STATUS
    runner = Runner(args)
    try:
        status, probe, output = runner.run("probe", "plain", "probe plain")
        if status == SKIP_STATUS:
            skip = [line for line in output.splitlines() if line.startswith("SKIP: ")]
            why = skip[0] if skip else "SKIP: the probe found no torch or no GPU"
            log(why)
            log(f"SHIM OVERHEAD: not measured ({why[len('SKIP: '):]})")
            return SKIP_STATUS
        if probe is None:
            log("SHIM OVERHEAD: FAILED: the probe child (import torch, a GPU) did not report")
            return 1
        for needed in (runner.build / "bin" / "cusnap", runner.build / "lib" / "libcusnap.so"):
            if not needed.exists():
                log(f"SHIM OVERHEAD: FAILED: {needed} is missing (configure with -DCUSNAP_BUILD_GPU_TESTS=ON, build)")
                return 1
        return measure(args, runner, probe)
    finally:
        shutil.rmtree(runner.control, ignore_errors=True)


def measure(args, runner, probe):
    """Runs the children, prints the ratios and the summary line; the exit status."""
    log(f"SHIM settings: torch {probe['torch']} (CUDA {probe['cuda']}) on {probe['gpu']} "
        f"(CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES', 'unset')}); {args.repeats} runs per kind "
        f"and variant; train: {args.warmup} warm-up + {args.steps} timed steps per model; malloc: sizes "
        f"{args.malloc_sizes}, {args.malloc_reps} calls each after 3; child timeout {args.child_timeout_s:.0f} s, "
        f"budget {args.budget_s:.0f} s; shim {runner.build / 'lib' / 'libcusnap.so'}, "
        f"CUSNAP_LOG={os.environ.get('CUSNAP_LOG', 'error (default)')}")

    reports = {(k, v): [] for k in ("train", "malloc") for v in ("plain", "shim")}
    for repeat in range(1, args.repeats + 1):
        order = ("plain", "shim") if repeat % 2 else ("shim", "plain")
        for kind in ("train", "malloc"):
            for variant in order:
                label = f"{kind} {variant} run {repeat}"
                status, report, _ = runner.run(kind, variant, label)
                if report is None:
                    continue
                if report.get("shim") != (variant == "shim"):
                    runner.failures.append(f"{label}: the shim is {'' if report.get('shim') else 'not '}loaded")
                    log(f"SHIM RUN {label}: the shim is {'' if report.get('shim') else 'NOT '}loaded in the child")
                    continue
                reports[(kind, variant)].append(report)
                if kind == "train":
                    log(f"SHIM RUN {label}: CUDA init {report['init_s']:.3f} s; " + "; ".join(
                        f"{m} step median {r['step_ms_median']:.3f} ms (p90 {r['step_ms_p90']:.3f}, min "
                        f"{r['step_ms_min']:.3f}), loop {r['loop_ms_per_step']:.3f} ms/step, loss "
                        f"{float.fromhex(r['final_loss']):.6g}" for m, r in report["models"].items()))
                else:
                    log(f"SHIM RUN {label}: {report['api']}; " + "; ".join(
                        f"{s} malloc {r['malloc_us']:.1f} us (p90 {r['malloc_us_p90']:.1f}) free {r['free_us']:.1f} us, "
                        f"torch.empty {r['torch_empty_us']:.1f} us del {r['torch_del_us']:.1f} us"
                        for s, r in report["sizes"].items()))

    # Medians over the runs of each run's median.
    def med(kind, variant, get):
        values = []
        for report in reports[(kind, variant)]:
            try:
                values.append(get(report))
            except (KeyError, TypeError):
                pass
        return median(values)

    parts = []
    losses_same = None
    for model in MODELS:
        step = [med("train", v, lambda r: r["models"][model]["step_ms_median"]) for v in ("plain", "shim")]
        loop = [med("train", v, lambda r: r["models"][model]["loop_ms_per_step"]) for v in ("plain", "shim")]
        log(f"SHIM RATIO {model} step (synchronized) {ratio_text(*step, 'ms')}; back to back "
            f"{ratio_text(*loop, 'ms/step')}")
        parts.append(f"{model} step {ratio_text(*step, 'ms')} (back to back {ratio_text(*loop, 'ms', 3).split('= ')[-1]})")
        losses = {v: {r["models"][model]["final_loss"] for r in reports[("train", v)] if model in r.get("models", {})}
                  for v in ("plain", "shim")}
        if losses["plain"] and losses["shim"]:
            same = losses["plain"] == losses["shim"]
            losses_same = same if losses_same is None else (losses_same and same)
            log(f"SHIM RATIO {model} final loss plain {sorted(losses['plain'])} shim {sorted(losses['shim'])}: "
                f"{'the same bits' if same else 'DIFFERENT'}")
    used = [med("train", v, lambda r: r["device_used_bytes"]) for v in ("plain", "shim")]
    reserved = [med("train", v, lambda r: r["reserved_bytes"]) for v in ("plain", "shim")]
    small = [med("malloc", v, lambda r: r["small_device_bytes"]) for v in ("plain", "shim")]
    log(f"SHIM RATIO device memory in use after training (torch reserved {reserved[0] / 2**20:.0f} / "
        f"{reserved[1] / 2**20:.0f} MiB) {ratio_text(used[0] / 2**20, used[1] / 2**20, 'MiB', 1)}; "
        f"{SMALL_COUNT} raw allocations of {SMALL_BYTES} bytes held at once "
        f"{ratio_text(small[0] / 2**20, small[1] / 2**20, 'MiB', 1)}")
    init = [median([r["init_s"] for k in ("train", "malloc") for r in reports[(k, v)]]) for v in ("plain", "shim")]
    log(f"SHIM RATIO CUDA init (first torch CUDA tensor) {ratio_text(*init, 's')}")
    sizes = [size_name(parse_size(s)) for s in args.malloc_sizes.split(",") if s]
    malloc_parts, free_parts, torch_parts = [], [], []
    for s in sizes:
        m = [med("malloc", v, lambda r: r["sizes"][s]["malloc_us"]) for v in ("plain", "shim")]
        f = [med("malloc", v, lambda r: r["sizes"][s]["free_us"]) for v in ("plain", "shim")]
        te = [med("malloc", v, lambda r: r["sizes"][s]["torch_empty_us"] + r["sizes"][s]["torch_del_us"])
              for v in ("plain", "shim")]
        log(f"SHIM RATIO {s}: cudaMalloc {ratio_text(*m, 'us', 1)}; cudaFree {ratio_text(*f, 'us', 1)}; "
            f"torch.empty + del without caching {ratio_text(*te, 'us', 1)}")
        malloc_parts.append(f"{s} {ratio_text(*m, 'us', 1)}")
        free_parts.append(f"{s} {ratio_text(*f, 'us', 1)}")
        torch_parts.append(f"{s} {ratio_text(*te, 'us', 1).split('= ')[-1]}")
    counts = {f"{k}/{v}": len(r) for (k, v), r in reports.items()}
    ok = not runner.failures and not runner.timeouts and not runner.not_run and all(counts.values())
    for failure in runner.failures:
        log(f"SHIM FAILED: {failure}")
    log("SHIM OVERHEAD: " + "; ".join(parts) + "; cudaMalloc " + ", ".join(malloc_parts) + "; cudaFree "
        + ", ".join(free_parts) + "; torch.empty+del uncached " + ", ".join(torch_parts)
        + f"; CUDA init {ratio_text(*init, 's')}; device memory after training "
        + ratio_text(used[0] / 2**20, used[1] / 2**20, 'MiB', 1)
        + f"; {SMALL_COUNT} x {SMALL_BYTES} B held " + ratio_text(small[0] / 2**20, small[1] / 2**20, 'MiB', 1)
        + "; losses "
        + ("same" if losses_same else "-" if losses_same is None else "DIFFER")
        + "; medians of " + ", ".join(f"{n} {kv}" for kv, n in counts.items())
        + f" runs; {len(runner.timeouts)} timed out"
        + (f" ({', '.join(runner.timeouts)})" if runner.timeouts else "")
        + f", {len(runner.failures)} failed, {runner.not_run} not run: {'PASS' if ok else 'FAIL'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
