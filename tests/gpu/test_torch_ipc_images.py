"""GPU, PyTorch: a trainer and an inference process on one GPU sharing CUDA tensors through
torch.multiprocessing (torch_ipc_job.py: the producer, the job's root, owns the weights and
writes new values every round; the consumer received them over a torch.multiprocessing
Queue, i.e. CUDA IPC, and reads them), as colocated reinforcement-learning setups run.
Each restore is followed by a round in which both read the kept values exactly, the consumer
writes, the producer reads it, writes an update, and the consumer reads the producer's update.

Rounds 1 and 2: `cusnap checkpoint` + `cusnap restore` in place (the restore's "job root pid"
line names the root). Rounds 3, 4 and 5: to disk and back, three times in a row:
`cusnap dump --pid <root> --images-dir D` (every process of the job gone, its GPU memory
free), then `cusnap restore --images-dir D`. Before the first of them another process takes
the producer's pid, so that restore brings the job back in a PID namespace of its own (and so
do the later ones: a job that ran in one comes back in one); each later command names the job
by the pid the restore printed (its "job root pid" line, or with --json its root_pid key,
round 4). Round 4's dump names the job by its namespace's init instead (the restore names it
too): the job under it is dumped. After the last round both processes print DONE PASS.

GPU_TORCH_IMAGES_ALLOC=default (the caching allocator's cudaMalloc segments, legacy CUDA IPC)
or expandable (PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True: VMM segments shared by
POSIX file descriptor). With GPU_IMAGES_VIA=criu rounds 3-5 are plain `criu dump -t <root>`
and `criu restore -d` with cusnap's CRIU plugin (<build>/lib/criu), as a container engine
runs CRIU; no pid is taken then (plain CRIU makes no PID namespace).

Every command's environment keeps NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1
NVSHMEM_DISABLE_NVLS=1 (gpu_harness.job_env). CRIU as test_workload_images.py finds it.
Without torch, a GPU torch can use, or CRIU, the test skips. `python3 -m py_compile` checks
it where there is no GPU.
"""

import ctypes
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
import gpu_harness as h  # noqa: E402
import workload_common as wc  # noqa: E402
from test_workload_images import criu_path, reap_launcher, run_criu, take_pid  # noqa: E402

JOB_SCRIPT = Path(__file__).resolve().parent / "torch_ipc_job.py"
ALLOCATOR = os.environ.get("GPU_TORCH_IMAGES_ALLOC", "default")
VIA_CRIU = os.environ.get("GPU_IMAGES_VIA", "cusnap") == "criu"
IN_PLACE = (1, 2)
TO_DISK = (3, 4, 5)
CYCLES = len(IN_PLACE) + len(TO_DISK)
LARGE_MIB = int(os.environ.get("GPU_TORCH_IPC_MIB", "64"))
ROLES = ("producer", "consumer")
START_TIMEOUT_S = 300
ROUND_TIMEOUT_S = 240

LINE = re.compile(r"TI role=(?P<role>\w+) ")
CHECK_LINE = re.compile(r"TI role=(?P<role>\w+) round=(?P<round>\d+) CHECK (?P<name>\S+) "
                        r"(?P<verdict>PASS|FAIL)(?P<detail>.*)")
ROLE_FAILED = re.compile(r"TI role=(?P<role>\w+) (?:ERROR .*|DONE FAIL.*)")
ROOT_LINE = re.compile(r"^job root pid (\d+)(?: \(pid (\d+) in its PID namespace\))?$", re.M)
INIT_LINE = re.compile(r"its init is pid (\d+) here")
NAMESPACED = "the job is restored in a PID namespace of its own"


class ImagesTorchJob:
    """torch_ipc_job.py under `cusnap run`, its output in a file (CRIU cannot take a pipe read
    outside the job along), in a session of its own."""

    def __init__(self):
        name = f"torch-ipc-images-{ALLOCATOR}" + ("-criu" if VIA_CRIU else "")
        self.out = h.out_dir(name)
        self.go_dir = self.out / "go"
        self.go_dir.mkdir()
        self.log = self.out / "job.log"
        self.control = h.control_dir(name)
        conf = "expandable_segments:True" if ALLOCATOR == "expandable" else "expandable_segments:False"
        self.env = h.job_env(self.control, OMP_NUM_THREADS=1, PYTORCH_CUDA_ALLOC_CONF=conf)
        self.cli_env = h.job_env(self.control, CUSNAP_CRIU=criu_path())
        self.process = None
        self.root = None        # the job's root as this machine numbers it (the restore says)
        self.init = None        # its PID namespace's init, once it runs in one
        self.holder = None      # the process holding the producer's first pid
        self.tree = []          # the job's processes here, taken before each dump
        self.baseline = None

    # ---- the job's output -----------------------------------------------------------------

    def text(self):
        return self.log.read_text(errors="replace")

    def wait_for(self, pattern, timeout):
        """Until both roles printed a line matching `pattern` (group 'role'); fails at once on a
        role's ERROR or DONE FAIL line, or after `timeout` s."""
        regex = re.compile(pattern)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            text = self.text()
            failed = ROLE_FAILED.search(text)
            assert not failed, f"a role failed: {failed.group(0)}\n{text[-3000:]}"
            if {m.group("role") for m in regex.finditer(text)} >= set(ROLES):
                return
            skipped = re.search(r"SKIP: .*", text)
            if skipped:
                pytest.skip(skipped.group(0))
            time.sleep(0.5)
        raise AssertionError(f"not both roles printed /{pattern}/ within {timeout} s:\n{self.text()[-3000:]}")

    def check_round(self, k, label):
        """Every CHECK of round k passed, both roles' among them, the consumer's read of the
        producer's update too."""
        checks = [m for m in CHECK_LINE.finditer(self.text()) if int(m.group("round")) == k]
        failed = [m.group(0) for m in checks if m.group("verdict") == "FAIL"]
        assert not failed, f"{label}: " + "; ".join(failed)
        names = {m.group("name") for m in checks}
        for must in ("producer_kept_large", "consumer_kept_large", "consumer_reads_producer_large",
                     "producer_reads_consumer_large"):
            assert must in names, f"{label}: no {must} check in round {k}: {sorted(names)}"
        print(f"TORCH IMAGES CHECKS {label} round {k}: {len(checks)} PASS", flush=True)

    def go(self, k, label):
        (self.go_dir / f"go-{k}").touch()
        if k < CYCLES:
            self.wait_for(rf"TI role=(?P<role>\w+) pid=\d+ READY {k + 1}\b", ROUND_TIMEOUT_S)
        else:
            self.wait_for(r"TI role=(?P<role>\w+) DONE PASS", ROUND_TIMEOUT_S)
        self.check_round(k, label)

    # ---- the job ----------------------------------------------------------------------------

    def start(self):
        self.baseline, _ = h.memory_used_mib(self.cli_env)
        # The job's orphans (the consumer once CRIU ended the producer, a namespace's init)
        # come here (PR_SET_CHILD_SUBREAPER) and are reaped (gone).
        ctypes.CDLL(None, use_errno=True).prctl(36, 1)
        command = [h.program("cusnap"), "run", "--", sys.executable, str(JOB_SCRIPT), "--control", str(self.go_dir),
                   "--cycles", str(CYCLES), "--mib", str(LARGE_MIB), "--allocator", ALLOCATOR]
        with open(self.log, "ab") as out:
            self.process = subprocess.Popen(command, env=self.env, stdin=subprocess.DEVNULL, stdout=out,
                                            stderr=subprocess.STDOUT, start_new_session=True)
        self.root = self.process.pid
        self.wait_for(r"TI role=(?P<role>\w+) pid=\d+ READY 1\b", START_TIMEOUT_S)
        self.check_round(0, "start")

    def root_named(self, output, label):
        """The root's pid here from a restore's "job root pid" line (its pid in its own
        namespace beside it when it runs in one)."""
        found = ROOT_LINE.search(output)
        assert found, f"{label}: the restore named no job root:\n{output[-2000:]}"
        return int(found.group(1))

    def in_place(self, k):
        label = f"torch images round {k} (in place)"
        state = str(self.out / f"state-{k}")
        ck = wc.cusnap(["checkpoint", "--pid", self.root, "--state-dir", state], self.cli_env, f"{label} checkpoint")
        assert ck.returncode == 0, f"{label}: checkpoint exited with {ck.returncode}:\n{ck.stdout[-3000:]}"
        during, _ = h.memory_used_mib(self.cli_env)
        h.log(f"{label}: GPU memory while checkpointed {during} MiB (before the job {self.baseline})")
        rs = wc.cusnap(["restore", "--pid", self.root, "--state-dir", state], self.cli_env, f"{label} restore")
        assert rs.returncode == 0, f"{label}: restore exited with {rs.returncode}:\n{rs.stdout[-3000:]}"
        assert self.root_named(rs.stdout, label) == self.root, f"{label}: the restore named another root"
        self.go(k, label)

    def gone(self, label, timeout=60):
        """Every process of the job (self.tree) is gone and reaped (this process is their
        subreaper since start): their pids are free, as CRIU needs them and take_pid too."""
        self.process = reap_launcher(self.process, timeout)
        h.await_reaped(self.tree, timeout, f"{label}: job processes still exist after the dump")

    def to_disk(self, k):
        label = f"torch images round {k} (to disk{' via criu' if VIA_CRIU else ''})"
        images = str(self.out / f"images-{k}")
        self.tree = [self.root] + h.descendants(self.root)
        if VIA_CRIU:
            self.via_criu(k, label, images)
        else:
            self.via_cusnap(k, label, images)
        self.go(k, label)

    def via_cusnap(self, k, label, images):
        # Round 4 names the job by its namespace's init: the job under it is dumped.
        named = self.init if k == 4 and self.init else self.root
        dump = wc.cusnap(["dump", "--pid", named, "--images-dir", images], self.cli_env, f"{label} dump")
        assert dump.returncode == 0, f"{label}: dump exited with {dump.returncode}:\n{dump.stdout[-3000:]}"
        self.gone(label)
        during, _ = h.memory_used_mib(self.cli_env)
        job_mib = [d - b for d, b in zip(during, self.baseline)]
        assert all(m < 64 for m in job_mib), f"{label}: GPU memory still in use after the dump: {job_mib} MiB"
        manifest = json.loads(Path(images, "cusnap-images.json").read_text())
        if self.holder is None:
            self.holder = take_pid(manifest["root_pid"])
            assert self.holder is not None, f"{label}: pid {manifest['root_pid']} could not be taken"
            h.log(f"{label}: pid {manifest['root_pid']} of the dump is now held by another process")
        json_out = k == 4
        restore = wc.cusnap(["restore", "--images-dir", images] + (["--json"] if json_out else []), self.cli_env,
                            f"{label} restore")
        assert restore.returncode == 0, f"{label}: restore exited with {restore.returncode}:\n{restore.stdout[-3000:]}"
        if k == TO_DISK[0]:
            assert NAMESPACED in restore.stdout, f"{label}: not restored in a namespace:\n{restore.stdout[-3000:]}"
        init = INIT_LINE.search(restore.stdout)
        assert init, f"{label}: the restore named no namespace init:\n{restore.stdout[-3000:]}"
        self.init = int(init.group(1))
        if json_out:
            # stdout is the JSON document; stderr (merged after it) the namespace's notes.
            doc = json.loads(restore.stdout[restore.stdout.index("{"):restore.stdout.rindex("}") + 1])
            assert doc["root_pid_in_job_namespace"] == manifest["root_pid"], doc
            self.root = int(doc["root_pid"])
        else:
            self.root = self.root_named(restore.stdout, label)
        h.log(f"{label}: the job's root is pid {self.root} here, {manifest['root_pid']} in its namespace "
              f"(init {self.init})")
        st = wc.cusnap(["status", "--pid", self.root, "--json"], self.cli_env, f"{label} status")
        assert st.returncode == 0, f"{label}: status --pid {self.root} exited with {st.returncode}"

    def via_criu(self, k, label, images):
        rc, log, dump_s = run_criu("dump", images, self.cli_env, "-t", str(self.root))
        assert rc == 0, f"{label}: criu dump exited with {rc}:\n{log[-3000:]}"
        assert "cusnap_criu: cusnap: dump-end: the manifest lists every image file" in log, log[-3000:]
        self.gone(label)
        rc, log, restore_s = run_criu("restore", images, self.cli_env, "-d", "--pidfile",
                                      str(Path(images) / "restored.pid"))
        assert rc == 0, f"{label}: criu restore exited with {rc}:\n{log[-3000:]}"
        assert "cusnap_criu: cusnap: activate" in log and "Error: cusnap_criu" not in log, log[-3000:]
        print(f"TORCH IMAGES VIA CRIU {label}: criu dump {dump_s:.2f} s, criu restore {restore_s:.2f} s", flush=True)

    def stop(self):
        if self.holder is not None:
            self.holder.kill()
            self.holder.wait()
        for pid in (h.descendants(self.root) + [self.root]) if self.root else []:
            try:
                os.kill(pid, 9)
            except ProcessLookupError:
                pass
        if self.process is not None:
            self.process.wait(timeout=30)


@pytest.fixture(scope="module")
def job():
    if importlib.util.find_spec("torch") is None:
        pytest.skip("SKIP: torch cannot be imported by this python3")
    if not criu_path():
        pytest.skip("SKIP: no CRIU (CUSNAP_CRIU, <source>/.criu from scripts/fetch_criu.sh, or criu on PATH)")
    torch_job = ImagesTorchJob()
    try:
        torch_job.start()
        yield torch_job
    finally:
        torch_job.stop()


@pytest.mark.parametrize("k", IN_PLACE)
def test_checkpoint_and_restore_in_place(job, k):
    job.in_place(k)


@pytest.mark.parametrize("k", TO_DISK)
def test_dump_and_restore_from_images(job, k):
    job.to_disk(k)


if __name__ == "__main__":
    sys.exit(pytest.main(["-s", "-v", "-p", "no:cacheprovider", __file__]))
