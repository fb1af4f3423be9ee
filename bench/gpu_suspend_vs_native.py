#!/usr/bin/env python3
"""Suspend + resume: native CUDA checkpoint of private memory vs cusnap (issue 15).

The same bytes, held by --processes processes on ONE GPU (each its device 0: set
CUDA_VISIBLE_DEVICES to pick the GPU), measured in one run:

  native   the processes hold private VMM memory and run without the shim; suspend = native
           lock + checkpoint of every process, resume = native restore + unlock (each step on
           every process at once, one thread each);
  shared   the processes hold POSIX-capable memory (what native checkpoint cannot take,
           DRIVER-FACTS F3-F5) under `cusnap run`; suspend = `cusnap checkpoint --all`,
           resume = `cusnap restore --all`;
  private  the same private memory as native, under `cusnap run` (CUSNAP_CARRY=all: the
           carrier moves it).

Each mode runs --cycles cycles; cycle 1 is "cold" (the carrier's first host memory), the
rest "warm". Every byte is verified after each resume. Prints one BENCH line per cycle and,
last, the ratios of cusnap's suspend + resume to native's (cold: cycle 1 against native's
cycle 1; warm: the mean of cycles 2.. against native's mean), and the save/reallocate phase
rates with the bytes the zero scan skipped.

    bench/gpu_suspend_vs_native.py --build <gpu build> [--bytes 4G] [--processes 2]
        [--cycles 3] [--allocation 1G] [--zero-fraction 0] [--modes native,shared,private]

<gpu build>: configured with -DCUSNAP_BUILD_GPU_TESTS=ON (bin/gpu_carry_hold, bin/cusnap,
lib/libcusnap.so). CUSNAP_GPU_SIM=1 runs it on the simulated driver (<build>/simcuda) as a
check of the script. Carrier settings (CUSNAP_CARRIER, CUSNAP_CARRIER_PIN, CUSNAP_ZERO_SCAN,
...) pass through from the environment. Exit status 0 when every cycle of every mode
verified, 1 otherwise.
"""

import argparse
import ctypes
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

CLI_TIMEOUT_S = 300


def log(text):
    print(text, flush=True)


class Hold:
    """One gpu_carry_hold process: started, READY awaited, commands sent."""

    def __init__(self, command, env):
        self.proc = subprocess.Popen(command, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     text=True, bufsize=1)
        self.pid = self.proc.pid
        line = self.expect("@@READY", 600)
        log(f"  pid {self.pid}: {line.strip()}")

    def expect(self, prefix, timeout):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            line = self.proc.stdout.readline()
            if not line:
                raise RuntimeError(f"pid {self.pid} exited (status {self.proc.poll()}) before {prefix}")
            if line.startswith(prefix):
                return line
        raise RuntimeError(f"pid {self.pid}: no {prefix} within {timeout} s")

    def verify(self):
        self.proc.stdin.write("verify\n")
        self.proc.stdin.flush()
        return self.expect("@@VERIFY", 600).split()[1] == "PASS"

    def quit(self):
        try:
            self.proc.stdin.write("quit\n")
            self.proc.stdin.flush()
            self.proc.wait(timeout=120)
        except (OSError, subprocess.TimeoutExpired):
            self.proc.kill()


class Native:
    """cuCheckpointProcess* through libcuda, each step on every pid at once."""

    def __init__(self, library):
        self.cuda = ctypes.CDLL(library)
        for name in ("cuCheckpointProcessLock", "cuCheckpointProcessCheckpoint",
                     "cuCheckpointProcessRestore", "cuCheckpointProcessUnlock"):
            getattr(self.cuda, name).argtypes = [ctypes.c_int, ctypes.c_void_p]
            getattr(self.cuda, name).restype = ctypes.c_int
        assert self.cuda.cuInit(0) == 0, "cuInit failed"
        # CUcheckpointLockArgs {timeoutMs, reserved}; the other argument structs are 64
        # zero bytes (no GPU pairs at restore).
        self.lock_args = (ctypes.c_uint * 16)(60000)
        self.zero_args = (ctypes.c_uint * 16)()

    def step(self, name, pids):
        function = getattr(self.cuda, name)
        args = self.lock_args if name.endswith("Lock") else self.zero_args
        results = {}

        def call(pid):
            results[pid] = function(pid, ctypes.addressof(args))

        threads = [threading.Thread(target=call, args=(p,)) for p in pids]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        bad = {p: r for p, r in results.items() if r != 0}
        assert not bad, f"{name} failed: {bad}"

    def suspend(self, pids):
        self.step("cuCheckpointProcessLock", pids)
        self.step("cuCheckpointProcessCheckpoint", pids)

    def resume(self, pids):
        self.step("cuCheckpointProcessRestore", pids)
        self.step("cuCheckpointProcessUnlock", pids)


def cusnap_phases(completed):
    """{phase name: phase JSON} from `cusnap ... --json` output."""
    try:
        document = json.loads(completed.stdout)
    except json.JSONDecodeError:
        return {}
    return {p["name"]: p for p in document.get("phases", [])}


def cusnap_command(cusnap, verb, state_dir, env):
    """Runs `cusnap <verb> --all` with --json; returns (completed, seconds). Raises on failure."""
    began = time.monotonic()
    done = subprocess.run([cusnap, verb, "--all", "--state-dir", state_dir, "--json"],
                          env=env, capture_output=True, text=True, timeout=CLI_TIMEOUT_S)
    took = time.monotonic() - began
    if done.returncode != 0:
        raise RuntimeError(f"cusnap {verb} exited {done.returncode}: {done.stdout[-2000:]} {done.stderr[-2000:]}")
    return done, took


def phase_text(phases, name):
    p = phases.get(name)
    if not p:
        return f"{name} -"
    gb = p["bytes"] / 1e9
    rate = gb / (p["elapsed_ms"] / 1000) if p["elapsed_ms"] > 0 else 0
    return (f"{name} {p['elapsed_ms']:.0f} ms {gb:.2f} GB {rate:.1f} GB/s "
            f"(copies {p.get('copy_gb_per_s', 0):.1f} GB/s, zero skipped {p.get('zero_bytes', 0) / 1e9:.2f} GB)")


def all_phases_text(completed):
    """ "discover 12, quiesce 3, ..." (ms) of every phase a cusnap command ran: where its time went."""
    return ", ".join(f"{name} {p['elapsed_ms']:.0f}" for name, p in cusnap_phases(completed).items())


def run_mode(mode, args, build, env_base):
    """Runs `mode`'s cycles; returns [(suspend s, resume s, verified)]."""
    hold = str(build / "bin" / "gpu_carry_hold")
    cusnap = str(build / "bin" / "cusnap")
    command = [hold, "--bytes", args.bytes, "--allocation", args.allocation,
               "--zero-fraction", str(args.zero_fraction)]
    env = dict(env_base)
    control = tempfile.mkdtemp(prefix="cusnap-bench-")
    os.chmod(control, 0o700)
    env["CUSNAP_CONTROL_DIR"] = control
    if mode == "shared":
        command.append("--shared")
    if mode != "native":
        command = [cusnap, "run", "--"] + command
    log(f"{mode}: starting {args.processes} processes of {args.bytes} each on one GPU")
    holds = [Hold(command, env) for _ in range(args.processes)]
    results = []
    library = "libcuda.so.1"
    if os.environ.get("CUSNAP_GPU_SIM") == "1":
        library = str(build / "simcuda" / "libcuda.so.1")
    native = Native(library) if mode == "native" else None
    state_dir = tempfile.mkdtemp(prefix="cusnap-bench-state-")
    try:
        pids = [h.pid for h in holds]
        for cycle in range(1, args.cycles + 1):
            phases_text = ""
            if native:
                began = time.monotonic()
                native.suspend(pids)
                suspend = time.monotonic() - began
                began = time.monotonic()
                native.resume(pids)
                resume = time.monotonic() - began
            else:
                ck, suspend = cusnap_command(cusnap, "checkpoint", state_dir, env)
                rs, resume = cusnap_command(cusnap, "restore", state_dir, env)
                phases_text = "; " + phase_text(cusnap_phases(ck), "save") + "; " + \
                    phase_text(cusnap_phases(rs), "reallocate")
            verified = all(h.verify() for h in holds)
            results.append((suspend, resume, verified))
            log(f"BENCH {mode:7s} cycle {cycle} ({'cold' if cycle == 1 else 'warm'}): suspend {suspend:.2f} s, "
                f"resume {resume:.2f} s, total {suspend + resume:.2f} s, bytes {'verified' if verified else 'DIFFER'}"
                f"{phases_text}")
            if not native:
                log(f"BENCH {mode:7s} cycle {cycle} phases: checkpoint {all_phases_text(ck)}; "
                    f"restore {all_phases_text(rs)}")
    finally:
        for h in holds:
            h.quit()
    return results


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--build", required=True)
    parser.add_argument("--bytes", default="4G", help="per process (K/M/G suffixes)")
    parser.add_argument("--allocation", default="1G", help="largest allocation")
    parser.add_argument("--processes", type=int, default=2)
    parser.add_argument("--cycles", type=int, default=3)
    parser.add_argument("--zero-fraction", type=float, default=0.0,
                        help="tail of each allocation left zero (0.5: half zeros)")
    parser.add_argument("--modes", default="native,shared,private")
    args = parser.parse_args()
    build = Path(args.build).resolve()
    env = dict(os.environ)
    env.update(NCCL_NVLS_ENABLE="0", TORCH_SYMM_MEM_DISABLE_MULTICAST="1", NVSHMEM_DISABLE_NVLS="1")
    env.pop("LD_PRELOAD", None)
    if os.environ.get("CUSNAP_GPU_SIM") == "1":
        sim = str(build / "simcuda")
        env["LD_LIBRARY_PATH"] = sim + (":" + env["LD_LIBRARY_PATH"] if env.get("LD_LIBRARY_PATH") else "")
        os.environ["LD_LIBRARY_PATH"] = env["LD_LIBRARY_PATH"]
    modes = [m for m in args.modes.split(",") if m]
    log(f"BENCH settings: {args.processes} processes x {args.bytes} on one GPU "
        f"(CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES', 'unset')}), allocations up to "
        f"{args.allocation}, zero fraction {args.zero_fraction}, {args.cycles} cycles; carrier "
        + " ".join(f"{k}={v}" for k, v in sorted(os.environ.items()) if k.startswith("CUSNAP_CARR")
                   or k == "CUSNAP_ZERO_SCAN"))
    all_results = {}
    ok = True
    for mode in modes:
        try:
            all_results[mode] = run_mode(mode, args, build, env)
        except (RuntimeError, AssertionError, OSError, subprocess.TimeoutExpired) as e:
            log(f"BENCH {mode}: FAILED: {e}")
            ok = False
    for results in all_results.values():
        ok = ok and all(v for _, _, v in results)
    native = all_results.get("native")
    if native:
        cold_native = sum(native[0][:2])
        warm_native = statistics.mean(s + r for s, r, _ in native[1:]) if len(native) > 1 else cold_native
        for mode, results in all_results.items():
            if mode == "native":
                continue
            cold = sum(results[0][:2])
            warm = statistics.mean(s + r for s, r, _ in results[1:]) if len(results) > 1 else cold
            log(f"BENCH RATIO {mode:7s} cold {cold:.2f} s / native {cold_native:.2f} s = {cold / cold_native:.3f}x; "
                f"warm {warm:.2f} s / native {warm_native:.2f} s = {warm / warm_native:.3f}x "
                f"(targets: cold <= 0.3x, warm <= 0.15x)")
    log(f"BENCH {'PASS' if ok else 'FAIL'}: every resume {'verified' if ok else 'did NOT verify'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
