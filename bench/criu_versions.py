#!/usr/bin/env python3
"""CRIU against CRIU on the same job: the share of a `cusnap dump` / `restore --images-dir` that
is CRIU's own (the processes' memory), timed for two CRIU programs side by side in one run.

The job is one process holding --anon-gib GiB of private anonymous memory and --memfd-gib GiB
of a shared memfd mapping (as a pinned host buffer of a CUDA process is), every page random
bytes. For each round and each CRIU (in turn, so both see the same machine state) the job is
started, dumped with `criu dump` to <dir> and `sync`, restored with `criu restore -d` (the page
cache dropped before it with `cold`), and its memory checked against the checksum it printed
before the dump (PASS).

    bench/criu_versions.py --criu-a .criu/bin/criu --criu-b /tmp/criu-4.3/bin/criu \\
        --case /dev/shm/criu-bench --case /var/tmp/criu-bench:cold --rounds 3

Prints a BENCH line per round, CRIU and case, and a RATIO line per case (b over a, the median
of the rounds). Needs root. Exit status 0 when every restored job passed, 1 otherwise.
"""

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

TIMEOUT_S = 600
CRIU_OPTIONS = ["--shell-job", "--file-locks", "--link-remap"]

# The job: fills its memory, prints its checksum, waits for SIGUSR1 after its restore, then
# checks the memory and prints PASS or FAIL.
JOB = r"""
import hashlib, mmap, os, signal, sys
anon_gib, memfd_gib = int(sys.argv[1]), int(sys.argv[2])
chunk = os.urandom(1 << 24)
def fill(buf):
    for off in range(0, len(buf), len(chunk)):
        buf[off:off + len(chunk)] = bytes(b ^ (off >> 24) & 0xff for b in chunk[:64]) + chunk[64:]
anon = mmap.mmap(-1, anon_gib << 30, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
fd = os.memfd_create("pinned-like")
os.ftruncate(fd, memfd_gib << 30)
shared = mmap.mmap(fd, memfd_gib << 30, flags=mmap.MAP_SHARED)
for buf in (anon, shared):
    fill(buf)
def digest():
    h = hashlib.blake2b()
    for buf in (anon, shared):
        h.update(buf)
    return h.hexdigest()
before = digest()
signal.signal(signal.SIGUSR1, lambda *_: None)
print("READY", before, flush=True)
signal.pause()
print("PASS" if digest() == before else "FAIL", flush=True)
"""


def run(command):
    """Runs `command`; returns its seconds. Raises naming it when it fails."""
    began = time.monotonic()
    done = subprocess.run(command, capture_output=True, text=True, timeout=TIMEOUT_S,
                          stdin=subprocess.DEVNULL)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(command[:2])} exited {done.returncode}:\n"
                           f"{done.stdout[-2000:]}\n{done.stderr[-2000:]}")
    return time.monotonic() - began


def wait_for(log, word):
    deadline = time.monotonic() + TIMEOUT_S
    while time.monotonic() < deadline:
        text = log.read_text(errors="replace")
        if word in text or "Traceback" in text:
            return text
        time.sleep(0.05)
    raise RuntimeError(f"the job did not print {word}:\n{log.read_text()[-2000:]}")


def pid_gone(pid):
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] in "ZX"
    except OSError:
        return True


def round_trip(criu, where, cold, anon_gib, memfd_gib):
    """One dump and restore of a fresh job with `criu`; returns (dump s, restore s, bytes)."""
    images = where / "images"
    shutil.rmtree(where, ignore_errors=True)
    images.mkdir(parents=True)
    log = where / "job.log"
    with open(log, "wb") as out:
        job = subprocess.Popen([sys.executable, "-c", JOB, str(anon_gib), str(memfd_gib)],
                               stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                               start_new_session=True)
    wait_for(log, "READY")
    began = time.monotonic()
    run([criu, "dump", "-t", str(job.pid), "-D", str(images), "-o", "dump.log", *CRIU_OPTIONS])
    subprocess.run(["sync"], check=True)
    dump_s = time.monotonic() - began
    job.wait()
    nbytes = sum(f.stat().st_blocks * 512 for f in images.iterdir() if f.is_file())
    if cold:
        subprocess.run(["sync"], check=True)
        Path("/proc/sys/vm/drop_caches").write_text("3\n")
    restore_s = run([criu, "restore", "-d", "-D", str(images), "-o", "restore.log",
                     "--pidfile", str(where / "restored.pid"), *CRIU_OPTIONS])
    pid = int((where / "restored.pid").read_text())
    os.kill(pid, 10)  # SIGUSR1: check the memory
    text = wait_for(log, "PASS") if "FAIL" not in log.read_text() else log.read_text()
    deadline = time.monotonic() + 60
    while not pid_gone(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    if "PASS" not in text:
        raise RuntimeError(f"the restored job did not pass:\n{text[-2000:]}")
    return dump_s, restore_s, nbytes


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--criu-a", required=True, help="the baseline CRIU")
    parser.add_argument("--criu-b", required=True, help="the CRIU measured against it")
    parser.add_argument("--case", action="append", required=True, help="<dir>[:cold]")
    parser.add_argument("--anon-gib", type=int, default=1)
    parser.add_argument("--memfd-gib", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    failed = 0
    for case in args.case:
        where, *rest = case.split(":")
        cold = rest == ["cold"]
        times = {"a": [], "b": []}
        for r in range(args.rounds):
            for name in ("a", "b"):
                criu = getattr(args, f"criu_{name}")
                try:
                    dump_s, restore_s, nbytes = round_trip(criu, Path(where) / f"criu-{name}", cold,
                                                           args.anon_gib, args.memfd_gib)
                except (RuntimeError, subprocess.TimeoutExpired) as e:
                    print(f"CASE FAILED {case} {name}: {e}", flush=True)
                    failed += 1
                    continue
                finally:
                    shutil.rmtree(Path(where) / f"criu-{name}", ignore_errors=True)
                times[name].append((dump_s, restore_s))
                print(f"BENCH {case} round {r + 1} {name} ({criu}) dump {dump_s:.2f} s restore "
                      f"{restore_s:.2f} s ({nbytes / 1e9:.2f} GB of images)", flush=True)
        if times["a"] and times["b"]:
            med = {n: [statistics.median(t[i] for t in times[n]) for i in (0, 1)] for n in times}
            print(f"RATIO {case} b/a dump {med['b'][0] / med['a'][0]:.2f} restore "
                  f"{med['b'][1] / med['a'][1]:.2f} (medians: a {med['a'][0]:.2f}/"
                  f"{med['a'][1]:.2f} s, b {med['b'][0]:.2f}/{med['b'][1]:.2f} s)", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
