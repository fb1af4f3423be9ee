#!/usr/bin/env python3
"""Images at the speed of the medium: `cusnap dump` / `restore --images-dir` against the path
NVIDIA documents for one process (native lock + checkpoint, then `criu dump`; `criu restore`,
then native restore + unlock), and against the medium's own sequential write and read of the
same bytes, all in one run.

For each --case <GiB>[+<GiB>...]:<dir>[:cold] the job (bench/gpu_images_job.py: a PyTorch
process per <GiB>, each holding that many GiB of caching-allocator tensors and a CUDA graph) is
started twice, once under `cusnap run` and once without it, and each is taken to <dir> and back:

  cusnap   dump = `cusnap dump --pid P --images-dir D` + sync; restore = `cusnap restore
           --images-dir D`
  native   dump = cuCheckpointProcessLock + Checkpoint, then `criu dump -t P` + sync;
           restore = `criu restore -d`, then cuCheckpointProcessRestore + Unlock
  medium   one sequential write of as many bytes as the cusnap images hold (holes left out)
           with fsync, and one read of them (dd, 64 MiB blocks)

`cold`: the page cache is dropped before each restore and before the medium's read (root).
Each restored job checks every tensor and replays its graph (PASS). Prints one BENCH line per
case and path, cusnap's phases (where its time went) and its GPU bytes' rate (the carrier
bytes over reallocate, which streams them from the files), and the ratios cusnap/native and cusnap/medium.
A job of several processes restores every process's carriers at once: for each such case, a
SCALE line sets its cusnap restore beside that of the case of its largest process alone (same
<dir>, same run), next to the ratio of their bytes.

    bench/gpu_images_vs_native.py --build <gpu build> --criu <criu> \\
        --case 8:/dev/shm/cusnap-bench --case 8:/var/tmp/cusnap-bench:cold \\
        --case 8+8:/dev/shm/cusnap-bench

Exit status 0 when every restored job passed, 1 otherwise.
"""

import argparse
import ctypes
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gpu_suspend_vs_native import Native, all_phases_text, cusnap_phases, log  # noqa: E402

JOB = Path(__file__).resolve().parent / "gpu_images_job.py"
TIMEOUT_S = 600
CRIU_OPTIONS = ["--tcp-established", "--ext-unix-sk", "--file-locks", "--link-remap"]


def alive(pid):
    """True while `pid` runs (a zombie is gone); reaps what this subreaper inherited."""
    try:
        while os.waitpid(-1, os.WNOHANG)[0] > 0:
            pass
    except ChildProcessError:
        pass
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")


def wait_gone(pid, timeout=60):
    deadline = time.monotonic() + timeout
    while alive(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not alive(pid), f"pid {pid} still runs"


def drop_caches():
    subprocess.run(["sync"], check=True)
    Path("/proc/sys/vm/drop_caches").write_text("3\n")


def run(command, env=None):
    """Runs `command`; returns (completed, seconds). Raises naming it when it fails."""
    began = time.monotonic()
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=TIMEOUT_S,
                          stdin=subprocess.DEVNULL)
    took = time.monotonic() - began
    if done.returncode != 0:
        raise RuntimeError(f"{command[0]} {command[1]} exited {done.returncode}:\n"
                           f"{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    return done, took


def tree_pids(root):
    """`root` and every process below it, parents first."""
    pids, i = [root], 0
    while i < len(pids):
        for task in Path(f"/proc/{pids[i]}/task").iterdir():
            pids += [int(c) for c in (task / "children").read_text().split()]
        i += 1
    return pids


class Job:
    """gpu_images_job.py started (under `cusnap run` when `cusnap`), its output in a file."""

    def __init__(self, gib, work, cusnap, env):
        self.log_path = work / "job.log"
        self.go = work / "go"
        command = [sys.executable, str(JOB), "--gib", gib, "--go", str(self.go)]
        if cusnap:
            command = [cusnap, "run", "--", *command]
        with open(self.log_path, "ab") as out:
            self.process = subprocess.Popen(command, env=env, stdin=subprocess.DEVNULL, stdout=out,
                                            stderr=subprocess.STDOUT, start_new_session=True)
        self.pid = self.process.pid
        self.wait_for("READY", TIMEOUT_S)

    def text(self):
        return self.log_path.read_text(errors="replace")

    def wait_for(self, word, timeout):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            text = self.text()
            if word in text or "FAIL" in text or "Traceback" in text:
                break
            time.sleep(0.1)
        assert word in self.text(), f"the job did not print {word}:\n{self.text()[-3000:]}"

    def gone(self):
        self.process = None  # reaped by alive() as any other child
        wait_gone(self.pid)

    def check(self):
        """Tells the restored job to go on; True when it printed PASS."""
        self.go.touch()
        self.wait_for("PASS", TIMEOUT_S)
        wait_gone(self.pid)
        return True


def data_bytes(images):
    """Bytes of data in `images`: allocated blocks of every file (holes left out)."""
    return sum(min(f.stat().st_size, f.stat().st_blocks * 512) for f in Path(images).iterdir()
               if f.is_file())


def fresh(directory):
    shutil.rmtree(directory, ignore_errors=True)
    directory.mkdir(parents=True)
    return directory


def cusnap_round_trip(gib, where, cold, build, env):
    cusnap = str(build / "bin" / "cusnap")
    work = fresh(where / "cusnap-work")
    images = where / "cusnap-images"
    shutil.rmtree(images, ignore_errors=True)
    job = Job(gib, work, cusnap, env)
    began = time.monotonic()
    dumped, _ = run([cusnap, "dump", "--pid", str(job.pid), "--images-dir", str(images), "--json"], env)
    subprocess.run(["sync"], check=True)
    dump_s = time.monotonic() - began
    job.gone()
    nbytes = data_bytes(images)
    if cold:
        drop_caches()
    restored, restore_s = run([cusnap, "restore", "--images-dir", str(images), "--json"], env)
    job.check()
    phases = cusnap_phases(restored)
    # The carriers stream from their files to the GPU in reallocate (read_carriers only finds
    # them): the GPU bytes' rate is reallocate's bytes over its time, from the first carrier
    # byte read to the last byte on the device.
    read = phases.get("reallocate", {})
    gpu_rate = read.get("bytes", 0) / 1e9 / (read["elapsed_ms"] / 1000) if read.get("elapsed_ms") else 0
    log(f"  cusnap dump phases: {all_phases_text(dumped)}")
    log(f"  cusnap restore phases: {all_phases_text(restored)}")
    log(f"  cusnap GPU bytes {read.get('bytes', 0) / 1e9:.2f} GB over reallocate: {gpu_rate:.1f} GB/s")
    return dump_s, restore_s, nbytes, read.get("elapsed_ms", 0) / 1000


def native_round_trip(gib, where, cold, criu, native, env):
    work = fresh(where / "native-work")
    images = fresh(where / "native-images")
    job = Job(gib, work, None, env)
    pids = tree_pids(job.pid)
    began = time.monotonic()
    native.suspend(pids)
    run([criu, "dump", "-t", str(job.pid), "-D", str(images), "-o", "dump.log", *CRIU_OPTIONS])
    subprocess.run(["sync"], check=True)
    dump_s = time.monotonic() - began
    job.gone()
    if cold:
        drop_caches()
    began = time.monotonic()
    run([criu, "restore", "-d", "-D", str(images), "-o", "restore.log", *CRIU_OPTIONS])
    native.resume(pids)
    restore_s = time.monotonic() - began
    job.check()
    return dump_s, restore_s, data_bytes(images)


def medium(where, nbytes, cold):
    probe = where / "medium-probe"
    blocks = max(1, (nbytes + (64 << 20) - 1) >> 26)
    _, write_s = run(["dd", "if=/dev/zero", f"of={probe}", "bs=64M", f"count={blocks}", "conv=fsync",
                      "status=none"])
    if cold:
        drop_caches()
    _, read_s = run(["dd", f"if={probe}", "of=/dev/null", "bs=64M", "status=none"])
    probe.unlink()
    return write_s, read_s


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--build", required=True, type=Path)
    parser.add_argument("--criu", required=True)
    parser.add_argument("--case", action="append", required=True,
                        help="<GiB>[+<GiB>...]:<dir>[:cold]")
    parser.add_argument("--no-native", action="store_true",
                        help="cusnap and the medium only (a quicker run; no cusnap/native ratio)")
    args = parser.parse_args()
    env = dict(os.environ, NCCL_NVLS_ENABLE="0", TORCH_SYMM_MEM_DISABLE_MULTICAST="1",
               NVSHMEM_DISABLE_NVLS="1", CUSNAP_CRIU=args.criu)
    # Restored jobs are adopted here (CRIU's restored tree outlives criu): reaped by alive().
    ctypes.CDLL(None).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER
    native = Native("libcuda.so.1")
    failed = 0
    restores = {}  # (GiB, dir, cold) -> cusnap's (restore, reallocate) seconds
    for case in args.case:
        gib, where, *rest = case.split(":")
        cold = rest == ["cold"]
        where = Path(where)
        log(f"CASE {gib} GiB in {where}{' (page cache dropped before each read)' if cold else ''}")
        try:
            c_dump, c_restore, c_bytes, c_reallocate = cusnap_round_trip(gib, where, cold, args.build, env)
            n_dump, n_restore, n_bytes = (float("nan"), float("nan"), 0) if args.no_native else \
                native_round_trip(gib, where, cold, args.criu, native, env)
            m_write, m_read = medium(where, c_bytes, cold)
        except (AssertionError, RuntimeError, subprocess.TimeoutExpired) as e:
            log(f"CASE FAILED: {e}")
            failed += 1
            continue
        finally:
            for leftover in ("cusnap-images", "native-images", "cusnap-work", "native-work"):
                shutil.rmtree(where / leftover, ignore_errors=True)
        log(f"BENCH {gib}GiB {where} cusnap dump {c_dump:.2f} s restore {c_restore:.2f} s "
            f"({c_bytes / 1e9:.2f} GB of images)")
        log(f"BENCH {gib}GiB {where} native dump {n_dump:.2f} s restore {n_restore:.2f} s "
            f"({n_bytes / 1e9:.2f} GB of images)")
        log(f"BENCH {gib}GiB {where} medium write {m_write:.2f} s read {m_read:.2f} s "
            f"({c_bytes / 1e9:.2f} GB)")
        log(f"RATIO {gib}GiB {where} cusnap/native dump {c_dump / n_dump:.2f} restore "
            f"{c_restore / n_restore:.2f}; cusnap/medium dump {c_dump / m_write:.2f} restore "
            f"{c_restore / m_read:.2f}")
        restores[(gib, where, cold)] = (c_restore, c_reallocate)
        log(json.dumps({"case": case, "cusnap": [c_dump, c_restore, c_bytes],
                        "native": [n_dump, n_restore, n_bytes], "medium": [m_write, m_read]}))
    scale_lines(restores)
    return 1 if failed else 0


def scale_lines(restores):
    """SCALE: a job of several processes' restore over that of its largest process alone."""
    for (gib, where, cold), (restore, reallocate) in restores.items():
        sizes = [int(g) for g in gib.split("+")]
        alone = restores.get((str(max(sizes)), where, cold))
        if len(sizes) > 1 and alone:
            log(f"SCALE {gib}GiB {where} restore {restore:.2f} s = {restore / alone[0]:.2f}x, "
                f"reallocate {reallocate:.2f} s = {reallocate / alone[1]:.2f}x those of "
                f"{max(sizes)}GiB alone ({alone[0]:.2f} s, {alone[1]:.2f} s); "
                f"bytes {sum(sizes) / max(sizes):.2f}x")


if __name__ == "__main__":
    sys.exit(main())
