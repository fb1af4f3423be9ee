"""GPU, PyTorch: a producer process passes CUDA tensors to a consumer through
torch.multiprocessing (default caching allocator, no expandable segments: legacy CUDA IPC,
cudaIpcGetMemHandle / cudaIpcOpenMemHandle, served by the shim); `cusnap checkpoint` +
`cusnap restore` of the whole tree, twice; after each restore both sides read the kept values
and each reads what the other writes, exactly; every process exits 0.

The job (torch_ipc_job.py under `cusnap run`): the producer is the job's root (`cusnap run`
replaces itself with it), the pid `cusnap checkpoint --pid` names; its tree holds the consumer
(started with the torch.multiprocessing "spawn" context) and Python's resource tracker (a
spawn helper, no CUDA). Every process of the tree inherits the shim's LD_PRELOAD, so each has
an endpoint; the test checks with `cusnap status --pid <producer> --json` that the producer
and the consumer are participants, and with gpu_inspect that the consumer imported the
producer's allocations through the shim (its cudaIpcOpenMemHandle was served as an import).

The job idles (no CUDA call) between rounds until the test creates <out>/go/go-<k>; both
processes announce it with "TI role=<producer|consumer> pid=<pid> READY <k>" (the protocol is
in torch_ipc_job.py). Each cycle, with both idle at READY k: checkpoint (GPU memory
released, nvidia-smi), `cusnap inspect`, restore (memory back), go-k, then round k's checks of
both sides must pass. After the last round both print DONE PASS and the job exits 0.

With GPU_TORCH_IPC_SHELL=1 (run_all.sh's torch_ipc_hangup) the job is started the way a
user starts one in the background from an interactive shell: `cusnap run ... &` from a bash
with job control (a session of its own, the job in a process group of its own), and in cycle
1 the shell is killed while the job is held. The kernel then sends the job's orphaned process
group SIGHUP and SIGCONT (shim/hold/hold_guard.h): both processes must still
exist and be stopped a second later, and the cycle goes on as usual; checkpoint and restore
name the producer from then on (the shell's tree is gone).

Without torch (or without a GPU torch can use) the job exits 77 with "SKIP: ..." and the test
skips. GPU_TORCH_IPC_CYCLES (default 2) and GPU_TORCH_IPC_MIB (default 64, the large tensor)
change the job.
"""

import importlib.util
import json
import os
import re
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
import gpu_harness as h  # noqa: E402
import workload_common as wc  # noqa: E402

JOB_SCRIPT = Path(__file__).resolve().parent / "torch_ipc_job.py"
CYCLES = int(os.environ.get("GPU_TORCH_IPC_CYCLES", "2"))
LARGE_MIB = int(os.environ.get("GPU_TORCH_IPC_MIB", "64"))
FROM_SHELL = os.environ.get("GPU_TORCH_IPC_SHELL", "0") == "1"
ROLES = ("producer", "consumer")
START_TIMEOUT_S = 300   # torch import in both processes, spawn, CUDA init
ROUND_TIMEOUT_S = 240
DONE_TIMEOUT_S = 120

CHECK_LINE = re.compile(r"TI role=(?P<role>\w+) round=(?P<round>\d+) CHECK (?P<name>\S+) "
                        r"(?P<verdict>PASS|FAIL)(?P<detail>.*)")
ROLE_FAILED = re.compile(r"TI role=(?P<role>\w+) (?:ERROR .*|DONE FAIL.*)")
SKIP_LINE = re.compile(r"SKIP: .*")


class TorchIpcJob:
    """The producer/consumer job under `cusnap run`, driven round by round."""

    def __init__(self):
        self.out = h.out_dir("torch-ipc")
        self.go_dir = self.out / "go"
        self.go_dir.mkdir()
        self.state_dir = self.out / "state"
        self.control = h.control_dir("torch-ipc")
        # The default caching allocator (cudaMalloc segments, legacy IPC), whatever the caller set.
        self.env = h.job_env(self.control, OMP_NUM_THREADS=1, PYTORCH_CUDA_ALLOC_CONF="expandable_segments:False",
                             CUSNAP_LOG=os.environ.get("CUSNAP_LOG", "warn"))
        self.cli_env = h.job_env(self.control)
        self.job = None
        self.pids = {}          # role -> pid
        self.shared_bytes = 0   # the tensors' bytes (the producer's start line)
        self.baseline = None
        self.broken = None
        self.skipped = None     # the job's SKIP line
        self.root = None        # the pid checkpoint and restore name: the job's root
        self.shell = None       # FROM_SHELL: the shell's pid, until cycle 1 kills it

    def start(self):
        self.baseline, source = h.memory_used_mib(self.cli_env)
        h.log(f"torch-ipc: GPU memory used before the job ({source}): {self.baseline} MiB")
        command = [h.program("cusnap"), "run", "--", sys.executable, str(JOB_SCRIPT), "--control", str(self.go_dir),
                   "--cycles", str(CYCLES), "--mib", str(LARGE_MIB)]
        if FROM_SHELL:
            command = ["setsid", "bash", "-c", 'set -m; "$@" & while :; do sleep 1; done', "shell"] + command
        self.job = h.Job(command, self.env, "torch-ipc")
        self.root = self.job.pid
        if FROM_SHELL:
            self.shell = self.job.pid
        try:
            self.wait_ready(1, START_TIMEOUT_S)
        except BaseException as e:
            self.broken = f"the job did not start ({e})"
            raise
        started = [line for line in self.job.history if "TI role=producer" in line and "shared_bytes=" in line]
        assert started, "the producer printed no start line"
        self.shared_bytes = int(re.search(r"shared_bytes=(\d+)", started[0]).group(1))
        if FROM_SHELL:
            self.root = self.pids["producer"]  # the shell's tree holds it until the shell goes
        h.log(f"torch-ipc: producer pid {self.pids['producer']}, consumer pid {self.pids['consumer']}, "
              f"{self.shared_bytes} bytes of CUDA tensors shared")
        self.check_round(0)

    def stop(self):
        wc.stop_job(self.job, "torch-ipc")
        if FROM_SHELL:  # the shell's tree no longer holds them once it was killed
            for pid in self.pids.values():
                if h.proc_state(pid) not in (None, "Z"):
                    os.kill(pid, 9)

    # ---- the handshake -----------------------------------------------------------------------

    def _await_roles(self, pattern, what, timeout):
        """Reads the job's output until both roles printed a line matching `pattern` (named
        group 'role'); fails when a role reports an error, the job ends, or on timeout; skips
        the test when the job said SKIP and exited 77."""
        def on_line(line):
            if SKIP_LINE.match(line):
                self.skipped = line.strip()

        def on_end(status):
            if status == 77 and self.skipped:
                self.broken = self.skipped
                pytest.skip(self.skipped)

        return wc.await_members(self.job, "torch-ipc", "role", ROLES, str, pattern, ROLE_FAILED, what, timeout,
                                on_line=on_line, on_end=on_end)

    def wait_ready(self, k, timeout=ROUND_TIMEOUT_S):
        seen = self._await_roles(rf"TI role=(?P<role>\w+) pid=(?P<pid>\d+) READY {k}\b", f"READY {k}", timeout)
        pids = {role: int(m.group("pid")) for role, m in seen.items()}
        if self.pids and pids != self.pids:
            raise AssertionError(f"torch-ipc: pids changed from {self.pids} to {pids}")
        if pids["producer"] != self.root:
            h.log(f"torch-ipc: the producer is pid {pids['producer']}, the job's root {self.root} "
                  f"(checkpoint and restore name the root: the producer is in its tree)")
        self.pids = pids

    def check_round(self, k):
        """Both roles printed checks for round k (kept values, and each reading the other's
        write) and all passed."""
        checks = [m for m in (CHECK_LINE.search(line) for line in list(self.job.history)) if m]
        mine = [m for m in checks if int(m.group("round")) == k]
        for role in ROLES:
            names = [m.group("name") for m in mine if m.group("role") == role]
            h.log(f"torch-ipc: round {k}, {role}: {len(names)} checks: {', '.join(names)}")
            other = "consumer" if role == "producer" else "producer"
            for kind in ("kept", f"reads_{other}"):
                assert any(n.startswith(f"{role}_{kind}_") for n in names), \
                    f"torch-ipc: round {k}: the {role} printed no {kind} check"
        failed = [m.group(0) for m in mine if m.group("verdict") == "FAIL"]
        assert not failed, f"torch-ipc: round {k}: " + "; ".join(failed)

    # ---- what the tree looks like to cusnap -------------------------------------------------

    def check_participants(self):
        """`cusnap status --pid <producer> --json` lists the producer and the consumer (the
        resource tracker too, with no allocation); the consumer's endpoint shows imports: its
        cudaIpcOpenMemHandle calls were served by the shim."""
        done = h.run([h.program("cusnap"), "status", "--pid", self.root, "--json"], 60, self.cli_env, check=False)
        assert done.returncode == 0, f"cusnap status --pid {self.root} --json exited with {done.returncode}"
        start = done.stdout.find("{")  # stderr is merged in: the document is what starts at "{"
        assert start >= 0, f"cusnap status --json printed no JSON document:\n{done.stdout}"
        status, _ = json.JSONDecoder().raw_decode(done.stdout[start:])
        listed = {p.get("pid"): p for p in status.get("participants", [])}
        tree = [self.root] + h.descendants(self.root)
        for pid in tree:
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    cmdline = f.read().replace(b"\0", b" ").decode(errors="replace")[:160]
            except OSError:
                cmdline = "?"
            h.log(f"torch-ipc: tree pid {pid}: {'participant' if pid in listed else 'NO endpoint'}, "
                  f"allocations {listed.get(pid, {}).get('allocations', '-')}: {cmdline}")
        for role, pid in self.pids.items():
            assert pid in listed, f"the {role} (pid {pid}) is not a participant: {sorted(listed)}"
        producer = h.inspect_endpoint(self.pids["producer"], self.cli_env)
        consumer = h.inspect_endpoint(self.pids["consumer"], self.cli_env)
        h.log(f"torch-ipc: producer: {producer['created']} allocations created, {producer['imported']} imported; "
              f"consumer: {consumer['created']} created, {consumer['imported']} imported, "
              f"{consumer['untracked_imports']} untracked imports")
        assert producer["created"] >= 1, "the producer's cudaMalloc memory is not served by the shim"
        assert consumer["imported"] >= 1, \
            "the consumer imported nothing through the shim: its cudaIpcOpenMemHandle was not served by cusnap"
        assert consumer["untracked_imports"] == 0, "the consumer holds imports cusnap cannot bring back"

    # ---- one checkpoint / restore cycle -------------------------------------------------------

    def run_cycle(self, k):
        if self.broken:
            raise AssertionError(f"torch-ipc: cycle {k} not run: {self.broken}")
        try:
            self._cycle(k)
        except BaseException as e:
            self.broken = f"cycle {k} failed ({e})"
            raise

    def _cycle(self, k):
        label = f"torch-ipc cycle {k}"
        h.log(f"---- {label}: checkpoint, restore, then round {k}: kept values, writes both ways ----")
        before, source = h.memory_used_mib(self.cli_env)
        ck = wc.cusnap(["checkpoint", "--pid", self.root, "--state-dir", self.state_dir], self.cli_env,
                       f"{label} checkpoint")
        assert ck.returncode == 0, f"{label}: cusnap checkpoint exited with {ck.returncode}"
        if self.shell is not None:
            self._kill_the_shell(label)
        during, _ = h.memory_used_mib(self.cli_env)
        states = {role: h.proc_state(pid) for role, pid in self.pids.items()}
        h.log(f"{label}: checkpointed; GPU memory used ({source}) {during} MiB; process states {states}")
        inspected = h.run([h.program("cusnap"), "inspect", self.state_dir], wc.CLI_TIMEOUT_S, self.cli_env,
                          check=False)
        if inspected.returncode != 0:
            h.log(f"{label}: cusnap inspect exited with {inspected.returncode} (not a failure of the cycle)")
        rs = wc.cusnap(["restore", "--pid", self.root, "--state-dir", self.state_dir], self.cli_env,
                       f"{label} restore")
        assert rs.returncode == 0, f"{label}: cusnap restore exited with {rs.returncode}"
        after, _ = h.memory_used_mib(self.cli_env)
        self._check_memory(label, before, during, after)

        (self.go_dir / f"go-{k}").touch()
        h.log(f"{label}: go-{k} given")
        if k < CYCLES:
            self.wait_ready(k + 1)
        else:
            self.finish()
        self.check_round(k)
        h.log(f"{label}: PASS")

    def _kill_the_shell(self, label):
        """The shell that started the job exits while the job is held: its orphaned group gets
        SIGHUP and SIGCONT from the kernel; the held processes must survive, stopped."""
        os.kill(self.shell, 9)
        self.job.process.wait(timeout=30)
        self.shell = None
        time.sleep(1.0)
        states = {role: h.proc_state(pid) for role, pid in self.pids.items()}
        h.log(f"{label}: the shell was killed while the job was held; process states now {states}")
        for role, state in states.items():
            assert state not in (None, "Z"), f"{label}: the {role} died with its shell ({state})"
            assert state in ("T", "t"), f"{label}: the {role} runs again after the hangup ({state})"

    def _check_memory(self, label, before, during, after):
        job_mib = sum(before) - sum(self.baseline)
        released = sum(before) - sum(during)
        regained = sum(after) - sum(during)
        shared_mib = self.shared_bytes // h.MIB
        h.log(f"{label}: GPU memory (MiB per GPU) {self.baseline} before the job, {before} before checkpoint, "
              f"{during} checkpointed, {after} restored; the job held {job_mib} MiB ({shared_mib} MiB of shared "
              f"tensors); checkpoint released {released} MiB, restore brought back {regained} MiB")
        assert job_mib > 0, f"{label}: the job holds no GPU memory ({before} vs {self.baseline} MiB)"
        assert released >= max(0.9 * job_mib, shared_mib), \
            f"{label}: checkpoint released only {released} of {job_mib} MiB"
        assert regained >= 0.8 * released, f"{label}: restore brought back only {regained} of {released} MiB"

    def finish(self):
        """After the last go: both roles DONE PASS, the producer exits 0 (it checked that the
        consumer exited 0: CHECK producer_consumer_exit)."""
        self._await_roles(r"TI role=(?P<role>\w+) DONE PASS", "DONE PASS", ROUND_TIMEOUT_S)
        if FROM_SHELL:  # not our child: its exit status is the (killed) shell's to see
            deadline = time.monotonic() + DONE_TIMEOUT_S
            while h.proc_state(self.pids["producer"]) not in (None, "Z") and time.monotonic() < deadline:
                time.sleep(0.2)
            assert h.proc_state(self.pids["producer"]) in (None, "Z"), "torch-ipc: the producer did not exit"
        else:
            status = self.job.finish(DONE_TIMEOUT_S)
            assert status == 0, f"torch-ipc: the producer exited with {status}"
        exits = [line for line in self.job.history if "CHECK producer_consumer_exit PASS" in line]
        assert exits, "torch-ipc: the producer did not report the consumer's exit status 0"


@pytest.fixture(scope="module")
def job():
    if importlib.util.find_spec("torch") is None:
        pytest.skip("SKIP: torch cannot be imported by this python3")
    ipc = TorchIpcJob()
    try:
        ipc.start()
        yield ipc
    finally:
        ipc.stop()


def test_producer_and_consumer_are_participants(job):
    job.check_participants()


@pytest.mark.parametrize("cycle", range(1, CYCLES + 1))
def test_checkpoint_restore_then_both_read_and_write(job, cycle):
    job.run_cycle(cycle)


if __name__ == "__main__":
    sys.exit(pytest.main(["-s", "-v", "-p", "no:cacheprovider", __file__]))
