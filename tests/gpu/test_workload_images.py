"""GPU: the NCCL workload (workload_rank.py --parts nccl: an eager all_reduce and one
captured in a CUDA graph) written to disk with `cusnap dump` and brought back in new processes
with `cusnap restore --images-dir`, twice (C -> R -> C -> R): the first images directory on the
disk, the second on /dev/shm. One rank per GPU; one GPU is enough (a one-rank job has the
launcher, its TCPStore and NCCL's cuMem allocations all the same). The ranks are started by
rank_launcher.py, not torchrun: torchrun's agent holds an io_uring CRIU cannot dump, and
`cusnap dump` must refuse that job before it changes anything (the last test).

Each cycle, with the ranks idle at READY k:
  - `cusnap dump --pid <launcher> --images-dir D`: exit 0; every process of the job is gone and
    the job's GPU memory is free (nvidia-smi);
  - `cusnap inspect D`: the manifest (GPU, driver, files with SHA-256);
  - `cusnap restore --images-dir D`: exit 0; the ranks run again in new processes (same pids,
    CRIU), go-k: their kept results and fresh inputs (eager and graph replay) are exact.
After the last cycle every rank prints DONE PASS.

Rates: the same byte count as the images is written and read back with O_DIRECT on the same
filesystem (the disk's own rate, measured in the same run); each cycle prints
  IMAGES RATE <where> dump <GB/s> restore <GB/s> disk write <GB/s> read <GB/s> ratio <d>/<r>
where dump is the bytes the images hold (CRIU's and the carrier files' data, holes left out)
over the time of save + criu_dump (a dump's save streams the carriers from the GPU into their
files), and restore the same bytes over reallocate (which streams them back) +
criu_restore (target: >= 0.8x the disk); IMAGES PARTS gives each phase's own figures.

With GPU_IMAGES_TAKE_PID=1 (run_all.sh's workload_images_pidns), before the second restore
another process takes the launcher's pid: the restore must bring the job back in a PID
namespace of its own (the job keeps its pids there), name the launcher's pid as this machine
numbers it, and a `cusnap checkpoint` + `cusnap restore` in place through that pid (cusnap
joins the job's namespaces; the native checkpoint API is called with the job's own pids)
must keep every result exact before go-2.

With GPU_IMAGES_PARTS=nccl,symm (run_all.sh's workload_images_symm), the ranks also hold
PyTorch symmetric memory (workload_rank.py --parts symm: symm_mem.empty + rendezvous,
one_shot_all_reduce eager and captured in a graph, multicast off), checked the same way after
each cycle; the torchrun refusal is left to the plain run (-k "not torchrun").

With GPU_IMAGES_VIA=criu (run_all.sh's workload_images_criu), each cycle is a plain `criu
dump -t <launcher>` and `criu restore` with cusnap's CRIU plugin (<build>/lib/criu as CRIU's
plugin directory), as a container engine runs CRIU: the plugin checkpoints the job in its
init and restores it in its exit; the same checks after each restore, and the wall time of
each CRIU command (IMAGES VIA CRIU lines).

CRIU: CUSNAP_CRIU, else <source>/.criu/bin/criu (scripts/fetch_criu.sh, carried to the GPU
machine), else `criu` on PATH; the test skips (exit 77 in run_all.sh) naming what is missing.
"""

import ctypes
import mmap
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

TAKE_PID = os.environ.get("GPU_IMAGES_TAKE_PID", "0") == "1"
PARTS = os.environ.get("GPU_IMAGES_PARTS", "nccl")
VIA_CRIU = os.environ.get("GPU_IMAGES_VIA", "cusnap") == "criu"
NAMESPACE_LINE = re.compile(r"its root is pid (\d+) there and pid (\d+) here")


def take_pid(pid):
    """A process (sleep) holding pid `pid`, started through /proc/sys/kernel/ns_last_pid; None
    when it cannot be had (not root, or other processes keep taking it)."""
    for _ in range(200):
        try:
            with open("/proc/sys/kernel/ns_last_pid", "w") as f:
                f.write(str(pid - 1))
        except OSError as e:
            h.log(f"cannot take pid {pid}: {e}")
            return None
        holder = subprocess.Popen(["sleep", "100000"])
        if holder.pid == pid:
            return holder
        holder.kill()
        holder.wait()
    return None

sys.path.insert(0, str(Path(__file__).resolve().parent))
import gpu_harness as h  # noqa: E402
import workload_common as wc  # noqa: E402

SRC = Path(__file__).resolve().parents[2]
CHUNK = 64 << 20
LAUNCHER = Path(__file__).resolve().parent / "rank_launcher.py"


def criu_path():
    given = os.environ.get("CUSNAP_CRIU")
    if given:
        return given
    fetched = SRC / ".criu" / "bin" / "criu"
    if fetched.exists():
        return str(fetched)
    return shutil.which("criu")


def run_criu(action, images, env, *args):
    """Plain `criu <action>` with cusnap's plugin (<build>/lib/criu), CRIU's log in
    <images>/<action>.log; returns (exit status, CRIU's log, s)."""
    os.makedirs(images, exist_ok=True)
    # The options `cusnap dump` gives CRIU (coordinator/images/criu.cc, CommonOptions): the
    # ranks' TCPStore connections, unix sockets, file locks.
    network_lock = [] if shutil.which("iptables") else ["--network-lock", "nftables"]
    command = [criu_path(), action, "-D", images, "-L", str(Path(h.program("cusnap")).parent.parent / "lib" / "criu"),
               "-v4", "-o", f"{action}.log", "--tcp-established", "--ext-unix-sk", "--file-locks",
               "--link-remap", "--shell-job", *network_lock, *args]
    started = time.monotonic()
    ran = subprocess.run(command, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                         timeout=wc.CLI_TIMEOUT_S)
    took = time.monotonic() - started
    log = Path(images, f"{action}.log").read_text(errors="replace")
    h.log(f"criu {action}: exit {ran.returncode} in {took:.2f} s; plugin lines:\n" +
          "\n".join(line for line in log.splitlines() if "cusnap_criu" in line))
    return ran.returncode, log, took


def reap_launcher(process, timeout):
    """Waits up to `timeout` s for `process` (a Popen, or None) to end, reaping it; returns
    None (what the caller keeps as its launcher from then on)."""
    if process is not None:
        try:
            process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            pass
    return None


def direct_rate(directory, nbytes):
    """(write GB/s, read GB/s) of `nbytes` (rounded up to CHUNK) with O_DIRECT in `directory`
    (tmpfs has no O_DIRECT: there, buffered writes and reads)."""
    path = Path(directory) / "disk-rate.bin"
    nbytes = max(CHUNK, (nbytes + CHUNK - 1) // CHUNK * CHUNK)
    buf = mmap.mmap(-1, CHUNK)  # page-aligned, as O_DIRECT wants
    buf.write(os.urandom(1 << 20) * (CHUNK >> 20))
    flags = os.O_CREAT | os.O_TRUNC | os.O_WRONLY
    try:
        fd = os.open(path, flags | os.O_DIRECT, 0o600)
    except OSError:
        fd = os.open(path, flags, 0o600)
    start = time.monotonic()
    for _ in range(nbytes // CHUNK):
        os.write(fd, buf)
    os.fsync(fd)
    write_s = time.monotonic() - start
    os.close(fd)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECT)
    except OSError:
        fd = os.open(path, os.O_RDONLY)
    start = time.monotonic()
    while os.readv(fd, [buf]) > 0:
        pass
    read_s = time.monotonic() - start
    os.close(fd)
    path.unlink()
    return nbytes / write_s / 1e9, nbytes / read_s / 1e9


def phase_ms_bytes(output, phase):
    """(ms, bytes) of `phase`'s line in a command's output; (0, 0) when it did not run."""
    m = re.search(rf"^{phase}\s+([\d.]+) ms\s+(?:\d+ participants?\s+)?[\d.]+ \S+\s+([\d.]+) GB/s",
                  output, re.M)
    if not m:
        return 0.0, 0.0
    ms, gbs = float(m.group(1)), float(m.group(2))
    return ms, gbs * ms * 1e6


def image_data_bytes(images):
    """Bytes of data the images hold: CRIU's image files and the carrier files, whose
    all-zero chunks are holes (allocated blocks counted)."""
    total = 0
    for f in Path(images).iterdir():
        if f.suffix == ".img":
            total += f.stat().st_size
        elif f.name.startswith("carrier-") and f.suffix == ".bin":  # carrier-<pid>-<k>.bin
            total += min(f.stat().st_size, f.stat().st_blocks * 512)
    return total


class ImagesJob:
    """The workload started with its output in a file (CRIU cannot take a pipe to a process
    outside the tree along) in a session of its own."""

    def __init__(self, name="images" + ("" if PARTS == "nccl" else "-" + PARTS.replace(",", "-")),
                 torchrun=False):
        self.ranks = wc.workload_ranks(h.job_env(None), 1)
        self.torchrun = torchrun
        self.out = h.out_dir(f"workload-{name}")
        self.go_dir = self.out / "go"
        self.go_dir.mkdir()
        self.log = self.out / "job.log"
        self.control = h.control_dir(f"wl-{name}")
        self.env = h.job_env(self.control, OMP_NUM_THREADS=1, NCCL_DEBUG="WARN")
        self.cli_env = h.job_env(self.control)
        criu = criu_path()
        if criu:
            self.cli_env["CUSNAP_CRIU"] = criu
        self.process = None
        self.root = None
        self.pids = {}
        self.holder = None      # TAKE_PID: the process holding the launcher's old pid
        self.namespaced = False # restored into a PID namespace of its own

    def start(self):
        self.baseline, _ = h.memory_used_mib(self.cli_env)
        # torchrun's agent holds an io_uring whatever its rendezvous (rank_launcher.py says
        # why), which CRIU cannot dump: the dumped job starts its ranks without it; the
        # torchrun job is the one `cusnap dump` must refuse
        # (test_a_torchrun_job_is_refused_before_anything_changes).
        launcher = ([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node"]
                    if self.torchrun else [sys.executable, str(LAUNCHER), "--ranks"])
        command = [h.program("cusnap"), "run", "--", *launcher, str(self.ranks), str(wc.RANK_SCRIPT),
                   "--parts", PARTS, "--cycles", "2", "--control", str(self.go_dir),
                   "--allreduce-mib", "256", "--graph-mib", "64"]
        with open(self.log, "ab") as out:
            self.process = subprocess.Popen(command, env=self.env, stdin=subprocess.DEVNULL,
                                            stdout=out, stderr=subprocess.STDOUT,
                                            start_new_session=True)
        self.root = self.process.pid
        self.wait_for(r"WL rank=(?P<rank>\d+) pid=(?P<pid>\d+) READY 1\b", wc.START_TIMEOUT_S)

    def text(self):
        return self.log.read_text(errors="replace")

    def wait_for(self, pattern, timeout):
        regex = re.compile(pattern)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            text = self.text()
            failed = wc.RANK_FAILED.search(text)
            assert not failed, f"a rank failed: {failed.group(0)}"
            seen = {int(m.group("rank")): m for m in regex.finditer(text)}
            if len(seen) == self.ranks:
                if "pid" in regex.groupindex:
                    self.pids = {r: int(m.group("pid")) for r, m in seen.items()}
                return
            time.sleep(1)
        raise AssertionError(f"not every rank printed /{pattern}/ within {timeout} s:\n{self.text()[-3000:]}")

    def all_pids(self):
        return [self.root] + list(self.pids.values())

    def gone(self, timeout=60):
        """Waits until no process of the job exists (the launcher is reaped if it is ours)."""
        self.process = reap_launcher(self.process, timeout)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            alive = [p for p in self.all_pids() if h.proc_state(p) not in (None, "Z", "X")]
            if not alive:
                return
            time.sleep(0.5)
        raise AssertionError(f"job processes still exist after the dump: {alive}")

    def criu(self, action, images, *args):
        """Plain `criu <action>` with cusnap's plugin (run_criu)."""
        return run_criu(action, images, self.cli_env, *args)

    def reaped(self, timeout=60):
        """Waits until no pid of the job is taken, not even by a zombie (CRIU gives the restored
        processes their pids back): this process, a subreaper since the dump, reaps the orphans."""
        h.await_reaped(self.all_pids(), timeout, "pids of the job still taken")

    def cycle_via_criu(self, k, images):
        label = f"images cycle {k} via criu ({images})"
        ctypes.CDLL(None, use_errno=True).prctl(36, 1)  # PR_SET_CHILD_SUBREAPER: orphans come here
        rc, log, dump_s = self.criu("dump", images, "-t", str(self.root))
        assert rc == 0, f"{label}: criu dump exited with {rc}:\n{log[-3000:]}"
        assert "cusnap_criu: cusnap: dump-end: the manifest lists every image file" in log, log[-3000:]
        self.gone()
        self.reaped()
        during, _ = h.memory_used_mib(self.cli_env)
        job_mib = [d - b for d, b in zip(during, self.baseline)]
        assert all(m < 64 for m in job_mib), f"{label}: GPU memory still in use after the dump: {job_mib} MiB"
        rc, log, restore_s = self.criu("restore", images, "-d", "--pidfile", str(Path(images) / "restored.pid"))
        assert rc == 0, f"{label}: criu restore exited with {rc}:\n{log[-3000:]}"
        assert "cusnap_criu: cusnap: activate" in log and "Error: cusnap_criu" not in log, log[-3000:]
        print(f"IMAGES VIA CRIU {images} images {image_data_bytes(images) / 2**30:.2f} GiB criu dump {dump_s:.2f} s "
              f"criu restore {restore_s:.2f} s", flush=True)
        self.go_and_check(k, label)

    def cycle(self, k, images):
        if VIA_CRIU:
            self.cycle_via_criu(k, images)
            return
        label = f"images cycle {k} ({images})"
        dump = wc.cusnap(["dump", "--pid", self.root, "--images-dir", images], self.cli_env, f"{label} dump")
        assert dump.returncode == 0, f"{label}: cusnap dump exited with {dump.returncode}:\n{dump.stdout}"
        self.gone()
        during, _ = h.memory_used_mib(self.cli_env)
        h.log(f"{label}: GPU memory with the job on disk {during} MiB (before the job {self.baseline})")
        job_mib = [d - b for d, b in zip(during, self.baseline)]
        assert all(m < 64 for m in job_mib), f"{label}: GPU memory still in use after the dump: {job_mib} MiB"
        h.run([h.program("cusnap"), "inspect", images], wc.CLI_TIMEOUT_S, self.cli_env)
        image_bytes = image_data_bytes(images)
        write_gbs, read_gbs = direct_rate(images, image_bytes)

        if TAKE_PID and k == 2:
            self.holder = take_pid(self.root)
            assert self.holder is not None, f"{label}: pid {self.root} could not be taken"
            h.log(f"{label}: pid {self.root} of the dump is now held by another process (sleep)")
        restore = wc.cusnap(["restore", "--images-dir", images], self.cli_env, f"{label} restore")
        assert restore.returncode == 0, f"{label}: cusnap restore exited with {restore.returncode}:\n{restore.stdout}"
        if self.holder is not None and not self.namespaced:
            self._check_namespace(label, restore.stdout)
        parts = {name: phase_ms_bytes(out, name) for name, out in
                 (("save", dump.stdout), ("criu_dump", dump.stdout),
                  ("reallocate", restore.stdout), ("criu_restore", restore.stdout))}
        dump_ms = parts["save"][0] + parts["criu_dump"][0]
        restore_ms = parts["reallocate"][0] + parts["criu_restore"][0]
        assert dump_ms > 0 and restore_ms > 0, f"{label}: no criu_dump or criu_restore phase line"
        dump_gbs = image_bytes / dump_ms / 1e6
        restore_gbs = image_bytes / restore_ms / 1e6
        print("IMAGES PARTS " + images + " " + " ".join(
            f"{name} {ms:.0f} ms {nbytes / 2**30:.2f} GiB" for name, (ms, nbytes) in parts.items()), flush=True)
        print(f"IMAGES RATE {images} images {image_bytes / 2**30:.2f} GiB dump {dump_gbs:.2f} GB/s "
              f"restore {restore_gbs:.2f} GB/s disk write {write_gbs:.2f} GB/s read {read_gbs:.2f} GB/s "
              f"ratio {dump_gbs / write_gbs:.2f}/{restore_gbs / read_gbs:.2f}", flush=True)
        self.go_and_check(k, label)

    def go_and_check(self, k, label):
        """go-k: every check the ranks print for round k must pass, each part's among them."""
        (self.go_dir / f"go-{k}").touch()
        if k < 2:
            self.wait_for(rf"WL rank=(?P<rank>\d+) pid=(?P<pid>\d+) READY {k + 1}\b", wc.ROUND_TIMEOUT_S)
        else:
            self.wait_for(r"WL rank=(?P<rank>\d+) DONE PASS", wc.ROUND_TIMEOUT_S)
        checks = [m for m in wc.CHECK_LINE.finditer(self.text()) if int(m.group("round")) == k]
        assert checks, f"{label}: no check printed for round {k}"
        failed = [m.group(0) for m in checks if m.group("verdict") == "FAIL"]
        assert not failed, f"{label}: " + "; ".join(failed)
        # Every part's own checks ran (their names start with the part's: nccl_..., symm_...).
        names = sorted({m.group("name") for m in checks})
        for part in PARTS.split(","):
            assert any(n.startswith(part + "_") for n in names), f"{label}: no {part} check in round {k}: {names}"
        print(f"IMAGES CHECKS {label} round {k}: {len(checks)} PASS: {' '.join(names)}", flush=True)

    def _check_namespace(self, label, output):
        """The job came back in a PID namespace of its own: named here by another pid, and a
        checkpoint + restore in place through that pid keeps it exact (checked at go)."""
        named = NAMESPACE_LINE.search(output)
        assert named, f"{label}: the restore did not say where the job runs:\n{output[-2000:]}"
        there, here = int(named.group(1)), int(named.group(2))
        assert there == self.root and here != self.root, f"{label}: root {there} there, {here} here"
        h.log(f"{label}: restored in a PID namespace of its own: launcher pid {there} there, {here} here")
        self.namespaced = True
        self.root, self.pids = here, {}  # the ranks' pids are the namespace's: not ours to use
        state = str(self.out / "in-place")
        ck = wc.cusnap(["checkpoint", "--pid", here, "--state-dir", state], self.cli_env, f"{label} in-place checkpoint")
        assert ck.returncode == 0, f"{label}: checkpoint through pid {here} exited with {ck.returncode}"
        rs = wc.cusnap(["restore", "--pid", here, "--state-dir", state], self.cli_env, f"{label} in-place restore")
        assert rs.returncode == 0, f"{label}: restore through pid {here} exited with {rs.returncode}"

    def stop(self):
        if self.holder is not None:
            self.holder.kill()
            self.holder.wait()
        if self.namespaced:  # the namespace's pids are not this machine's: kill by tree
            for pid in h.descendants(self.root) + [self.root]:
                try:
                    os.kill(pid, 9)
                except ProcessLookupError:
                    pass
            return
        for pid in reversed(self.all_pids()):
            try:
                os.kill(pid, 9)
            except (ProcessLookupError, TypeError):
                pass


@pytest.fixture(scope="module")
def job():
    if not criu_path():
        pytest.skip("SKIP: no CRIU (CUSNAP_CRIU, <source>/.criu from scripts/fetch_criu.sh, or criu on PATH)")
    workload = ImagesJob()
    try:
        workload.start()
        yield workload
    finally:
        workload.stop()


def test_dump_to_disk_and_restore_in_new_processes(job):
    job.cycle(1, str(job.out / "images-disk"))


def test_dump_the_restored_job_to_dev_shm_and_restore_again(job):
    shm = Path("/dev/shm") / f"cusnap-images-{os.getpid()}"
    shutil.rmtree(shm, ignore_errors=True)
    try:
        job.cycle(2, str(shm))
    finally:
        shutil.rmtree(shm, ignore_errors=True)


def test_a_torchrun_job_is_refused_before_anything_changes(job):
    """torchrun: its agent holds an io_uring, which CRIU cannot dump; the dump is refused at
    check_images (exit 3) and the job goes on, exact, as if nothing was asked."""
    del job  # runs after the two cycles, on its own job
    other = ImagesJob("images-torchrun", torchrun=True)
    try:
        other.start()
        dump = wc.cusnap(["dump", "--pid", other.root, "--images-dir", str(other.out / "images")],
                         other.cli_env, "images torchrun dump")
        assert dump.returncode == 3, f"cusnap dump exited with {dump.returncode}:\n{dump.stdout}"
        assert "holds an io_uring instance, which CRIU cannot dump" in dump.stdout, dump.stdout
        assert "quiesce" not in dump.stdout, "the refusal came after the job was changed"
        (other.go_dir / "go-1").touch()
        other.wait_for(r"WL rank=(?P<rank>\d+) pid=(?P<pid>\d+) READY 2\b", wc.ROUND_TIMEOUT_S)
        checks = [m for m in wc.CHECK_LINE.finditer(other.text()) if int(m.group("round")) == 1]
        assert checks and all(m.group("verdict") == "PASS" for m in checks), other.text()[-3000:]
    finally:
        other.stop()


if __name__ == "__main__":
    sys.exit(pytest.main(["-s", "-v", "-p", "no:cacheprovider", __file__]))
