"""What the PyTorch workload tests (tests/gpu/test_workload_*.py) share: a torchrun job
of workload_rank.py with one rank per GPU (GPU_WORKLOAD_RANKS overrides; 2 on our machines) (under `cusnap run`, or bare for the native-only baseline),
the READY / go handshake with its ranks, the per-round check lines, `cusnap checkpoint` and
`cusnap restore` with their phase lines quoted, GPU memory and placement from nvidia-smi.

The job: `[cusnap run --] python3 -m torch.distributed.run --standalone --nproc-per-node 2
workload_rank.py --parts P --cycles N --control <out>/go`. The launcher is the job's root, the
pid that `cusnap checkpoint --pid` names; rank r runs on GPU r. Between rounds the ranks idle
(no CUDA call) until the test creates <out>/go/go-<k>; they announce it with
"WL rank=<r> pid=<pid> READY <k>" (workload_rank.py describes the protocol).

Every wait is bounded; a failed cycle marks the job broken, so later cycles of the same job
fail at once instead of waiting; `stop()` kills whatever is left (ranks first).
"""

import json
import os
import queue
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

import gpu_harness as h

HERE = Path(__file__).resolve().parent
RANK_SCRIPT = HERE / "workload_rank.py"
NATIVE_SCRIPT = HERE / "workload_native.py"
START_TIMEOUT_S = 300   # torch import, NCCL init, graph capture
ROUND_TIMEOUT_S = 240   # one round after a go file (private memory digests included)
CLI_TIMEOUT_S = 240     # one cusnap command
DONE_TIMEOUT_S = int(os.environ.get("CUSNAP_GPU_DONE_TIMEOUT_S", "120"))  # exit after DONE

# A phase line of `cusnap checkpoint` / `restore` (src/cli/output.cc FormatPhaseLine):
# "<name> <ms> ms[  <n> participant(s)][  <bytes>  <GB/s> GB/s][  (note)][  FAILED]".
PHASE_LINE = re.compile(r"^\S+\s+\d+(?:\.\d+)? ms\b")  # name, ms, then participants, bytes, notes
CHECK_LINE = re.compile(r"WL rank=(?P<rank>\d+) round=(?P<round>\d+) CHECK (?P<name>\S+) "
                        r"(?P<verdict>PASS|FAIL)(?P<detail>.*)")
RANK_FAILED = re.compile(r"WL rank=(?P<rank>\d+) (?:ERROR .*|DONE FAIL.*)")


def cusnap(args, env, label, timeout=CLI_TIMEOUT_S):
    """Runs `cusnap <args>`, logs its output, prints each phase line as
    "WORKLOAD PHASE <label> | <line>" (run_all.sh gathers them), returns the CompletedProcess."""
    start = time.monotonic()
    done = h.run([h.program("cusnap")] + [str(a) for a in args], timeout, env, check=False)
    took = time.monotonic() - start
    for line in done.stdout.splitlines():
        if PHASE_LINE.match(line):
            print(f"WORKLOAD PHASE {label} | {line}", flush=True)
    print(f"WORKLOAD PHASE {label} | exit status {done.returncode}, {took:.2f} s in all", flush=True)
    return done


def gpu_uuids(env):
    """GPU UUIDs by CUDA ordinal (CUDA_DEVICE_ORDER=PCI_BUS_ID, so nvidia-smi's index order):
    from nvidia-smi, else from torch in a child process."""
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=index,uuid", "--format=csv,noheader"],
                             stdout=subprocess.PIPE, text=True, timeout=60, check=True).stdout
        rows = sorted((int(i), u.strip()) for i, u in (line.split(",") for line in out.strip().splitlines()))
        return [u for _, u in rows]
    except (OSError, subprocess.SubprocessError, ValueError) as e:
        h.log(f"nvidia-smi gave no GPU UUIDs ({e}); asking torch")
    code = ("import torch\n"
            "for i in range(torch.cuda.device_count()):\n"
            "    print(str(torch.cuda.get_device_properties(i).uuid))\n")
    out = subprocess.run([sys.executable, "-c", code], env=h.job_env(None, LD_PRELOAD=None),
                         stdout=subprocess.PIPE, text=True, timeout=120, check=True).stdout
    return [u if u.startswith("GPU-") else "GPU-" + u for u in out.split()]


def gpu_placement(pids):
    """{pid: set of GPU UUIDs where nvidia-smi lists it as a compute process} for `pids`, or
    None when nvidia-smi cannot say (absent, or it lists no process of this job)."""
    try:
        out = subprocess.run(["nvidia-smi", "--query-compute-apps=pid,gpu_uuid", "--format=csv,noheader"],
                             stdout=subprocess.PIPE, text=True, timeout=60, check=True).stdout
    except (OSError, subprocess.SubprocessError) as e:
        h.log(f"nvidia-smi --query-compute-apps failed: {e}")
        return None
    where = {pid: set() for pid in pids}
    for line in out.strip().splitlines():
        fields = [f.strip() for f in line.split(",")]
        if len(fields) == 2 and fields[0].isdigit() and int(fields[0]) in where:
            where[int(fields[0])].add(fields[1])
    return where


def stop_job(job, name):
    """Kills `job` (an h.Job, or None) if it still runs; never raises: teardown must go on."""
    if job is None:
        return
    try:
        job.kill()
    except Exception as e:  # noqa: BLE001 - teardown must go on
        h.log(f"{name}: killing the job: {e}")


def await_members(job, name, label, members, member_of, pattern, failed, what, timeout, on_line=None,
                  on_end=None):
    """Reads `job`'s output lines until each of `members` (ranks, roles) printed a line matching
    `pattern`, whose named group `label` (turned into a member by `member_of`) says who; returns
    {member: match}. Fails (AssertionError naming the job `name`) when a line matches `failed`
    (group `label`: who failed), when the job ends first (`on_end(status)` is called before, and
    may skip the test), or after `timeout` s. `on_line(line)` sees every line."""
    regex = re.compile(pattern)
    members = list(members)
    seen = {}
    deadline = time.monotonic() + timeout
    while len(seen) < len(members):
        left = deadline - time.monotonic()
        if left <= 0:
            missing = sorted(set(members) - set(seen))
            raise AssertionError(f"{name}: {label}(s) {missing} did not print {what} within {timeout} s")
        try:
            line = job.lines.get(timeout=min(left, 5.0))
        except queue.Empty:
            continue
        if line is None:
            job.lines.put(None)
            status = job.process.wait()
            if on_end is not None:
                on_end(status)
            raise AssertionError(f"{name}: the job ended (status {status}) before every {label} printed {what}")
        if on_line is not None:
            on_line(line)
        bad = failed.search(line)
        if bad:
            raise AssertionError(f"{name}: {label} {bad.group(label)} failed: {line.strip()}")
        match = regex.search(line)
        if match and member_of(match.group(label)) in members:
            seen[member_of(match.group(label))] = match
    return seen


class Workload:
    """One torchrun job of workload_rank.py (one rank per GPU: `ranks`), driven cycle by
    cycle."""

    def __init__(self, name, parts, cycles, shim=True, rank_args=(), min_ranks=2):
        self.name = name
        self.ranks = workload_ranks(h.job_env(None), min_ranks)
        self.parts = parts
        self.cycles = cycles
        self.shim = shim
        self.rank_args = [str(a) for a in rank_args]
        self.out = h.out_dir(f"workload-{name}")
        self.go_dir = self.out / "go"
        self.go_dir.mkdir()
        self.state_dir = self.out / "state"
        self.control = h.control_dir(f"wl-{name}") if shim else None
        extra = {"OMP_NUM_THREADS": 1, "CUSNAP_LOG": os.environ.get("CUSNAP_LOG", "warn"),
                 "NCCL_DEBUG": os.environ.get("NCCL_DEBUG", "WARN")}
        if not shim:
            extra["LD_PRELOAD"] = None
        self.env = h.job_env(self.control, **extra)
        self.cli_env = h.job_env(self.control)
        self.job = None
        self.pids = {}          # rank -> pid
        self.baseline = None    # MiB per GPU before the job started
        self.broken = None      # why the job cannot go on

    # ---- starting and stopping --------------------------------------------------------

    def start(self):
        """Starts the job and waits until both ranks idle at READY 1 (round 0 checked)."""
        self.baseline, source = h.memory_used_mib(self.cli_env)
        h.log(f"{self.name}: GPU memory used before the job ({source}): {self.baseline} MiB")
        command = [sys.executable, "-m", "torch.distributed.run", "--standalone",
                   "--nproc-per-node", str(self.ranks), str(RANK_SCRIPT), "--parts", self.parts,
                   "--cycles", str(self.cycles), "--control", str(self.go_dir)] + self.rank_args
        if self.shim:
            command = [h.program("cusnap"), "run", "--"] + command
        self.job = h.Job(command, self.env, self.name)
        try:
            self.wait_ready(1, START_TIMEOUT_S)
            self.check_round(0)
        except BaseException as e:
            self.broken = f"the job did not start ({e})"
            raise
        h.log(f"{self.name}: launcher pid {self.job.pid}, rank pids {self.pids}")

    def stop(self):
        """Kills the job if it still runs (ranks first); never raises."""
        stop_job(self.job, self.name)

    # ---- the handshake ---------------------------------------------------------------------

    def _await_ranks(self, pattern, what, timeout):
        """Reads the job's output until every rank printed a line matching `pattern` (with a
        named group 'rank'); fails when a rank reports an error, the job ends, or on timeout."""
        return await_members(self.job, self.name, "rank", range(self.ranks), int, pattern, RANK_FAILED,
                             what, timeout)

    def wait_ready(self, k, timeout=ROUND_TIMEOUT_S):
        seen = self._await_ranks(rf"WL rank=(?P<rank>\d+) pid=(?P<pid>\d+) READY {k}\b", f"READY {k}", timeout)
        pids = {rank: int(m.group("pid")) for rank, m in seen.items()}
        if self.pids and pids != self.pids:
            raise AssertionError(f"{self.name}: rank pids changed from {self.pids} to {pids}")
        self.pids = pids

    def go(self, k):
        (self.go_dir / f"go-{k}").touch()
        h.log(f"{self.name}: go-{k} given")

    def check_round(self, k):
        """Every rank printed checks for round k and all passed."""
        checks = [m for m in (CHECK_LINE.search(line) for line in list(self.job.history)) if m]
        mine = [m for m in checks if int(m.group("round")) == k]
        for rank in range(self.ranks):
            names = [m.group("name") for m in mine if int(m.group("rank")) == rank]
            h.log(f"{self.name}: round {k}, rank {rank}: {len(names)} checks: {', '.join(names)}")
            assert names, f"{self.name}: rank {rank} printed no check for round {k}"
        failed = [m.group(0) for m in mine if m.group("verdict") == "FAIL"]
        assert not failed, f"{self.name}: round {k}: " + "; ".join(failed)

    # ---- one checkpoint / restore cycle ------------------------------------------------------

    def run_cycle(self, k, device_map=None, hold_s=0, hold_stops=None):
        """With the ranks idle at READY k: `cusnap checkpoint`, GPU memory released, the job
        held `hold_s` seconds (with `hold_stops` True/False: every rank must be stopped / must
        not be, docs/LONG-SUSPEND.md), `cusnap restore` (with `device_map`, GPUs by ordinal or
        UUID), memory regained and, when nvidia-smi lists the ranks, each rank on the GPU the
        map sends its GPU to; then go-k and the ranks' round k (kept results and fresh inputs)
        must pass."""
        if self.broken:
            raise AssertionError(f"{self.name}: cycle {k} not run: {self.broken}")
        try:
            self._cycle(k, device_map, hold_s, hold_stops)
        except BaseException as e:
            self.broken = f"cycle {k} failed ({e})"
            raise

    def _hold(self, label, hold_s, hold_stops):
        """Keeps the job checkpointed for hold_s seconds; checks the ranks' /proc state on the
        way (stopped by cusnap's hold, or not) and that none of them exited."""
        states = {pid: h.proc_state(pid) for pid in self.pids.values()}
        h.log(f"{label}: holding the job {hold_s} s; rank states {states}")
        if hold_stops is not None:
            stopped = {pid: st in ("T", "t") for pid, st in states.items()}
            assert all(v == hold_stops for v in stopped.values()), \
                f"{label}: ranks should {'' if hold_stops else 'not '}be stopped while held: {states}"
        deadline = time.monotonic() + hold_s
        while time.monotonic() < deadline:
            time.sleep(min(5.0, max(0.0, deadline - time.monotonic())))
            gone = [pid for pid in self.pids.values() if h.proc_state(pid) in (None, "Z", "X")]
            assert not gone, f"{label}: rank(s) {gone} exited while the job was held"
        h.log(f"{label}: held {hold_s} s; rank states {({pid: h.proc_state(pid) for pid in self.pids.values()})}")

    def _cycle(self, k, device_map, hold_s=0, hold_stops=None):
        assert self.shim, "run_cycle needs the job under cusnap run"
        label = f"{self.name} cycle {k}" + (f" (device map {device_map})" if device_map else "")
        h.log(f"---- {label}: checkpoint, restore, then round {k} with fresh inputs ----")
        pids = list(self.pids.values())
        before, source = h.memory_used_mib(self.cli_env)
        where_before = gpu_placement(pids)
        h.log(f"{label}: GPU memory used ({source}) before checkpoint {before} MiB; ranks on {where_before}")

        ck = cusnap(["checkpoint", "--pid", self.job.pid, "--state-dir", self.state_dir], self.cli_env,
                    f"{self.name} cycle {k} checkpoint")
        assert ck.returncode == 0, f"{label}: cusnap checkpoint exited with {ck.returncode}"
        during, _ = h.memory_used_mib(self.cli_env)
        h.log(f"{label}: GPU memory used while checkpointed {during} MiB; ranks on {gpu_placement(pids)}")
        inspected = h.run([h.program("cusnap"), "inspect", self.state_dir], CLI_TIMEOUT_S, self.cli_env, check=False)
        if inspected.returncode != 0:
            h.log(f"{label}: cusnap inspect exited with {inspected.returncode} (not a failure of the cycle)")
        if hold_s:
            self._hold(label, hold_s, hold_stops)

        restore = ["restore", "--pid", self.job.pid, "--state-dir", self.state_dir]
        if device_map:
            restore += ["--device-map", device_map]
        rs = cusnap(restore, self.cli_env, f"{self.name} cycle {k} restore" + (" --device-map" if device_map else ""))
        assert rs.returncode == 0, f"{label}: cusnap restore exited with {rs.returncode}"
        after, _ = h.memory_used_mib(self.cli_env)
        where_after = gpu_placement(pids)
        h.log(f"{label}: GPU memory used after restore {after} MiB; ranks on {where_after}")
        self._check_memory(label, before, during, after)
        self._check_placement(label, where_before, where_after, device_map)

        self.go(k)
        if k < self.cycles:
            self.wait_ready(k + 1)
        else:
            self.finish()
        self.check_round(k)
        h.log(f"{label}: PASS")

    def finish(self):
        """After the last go: both ranks DONE PASS and the launcher exits 0."""
        self._await_ranks(r"WL rank=(?P<rank>\d+) DONE PASS", "DONE PASS", ROUND_TIMEOUT_S)
        status = self.job.finish(DONE_TIMEOUT_S)
        assert status == 0, f"{self.name}: the launcher exited with {status}"

    def _check_memory(self, label, before, during, after):
        job_mib = sum(before) - sum(self.baseline)
        released = sum(before) - sum(during)
        regained = sum(after) - sum(during)
        for gpu in range(len(before)):
            h.log(f"{label}: GPU {gpu}: {self.baseline[gpu]} MiB before the job, {before[gpu]} before "
                  f"checkpoint, {during[gpu]} checkpointed, {after[gpu]} restored")
        h.log(f"{label}: the job held {job_mib} MiB; checkpoint released {released} MiB, restore "
              f"brought back {regained} MiB")
        assert job_mib > 0, f"{label}: the job holds no GPU memory ({before} vs {self.baseline} MiB)"
        assert released >= 0.9 * job_mib, f"{label}: checkpoint released only {released} of {job_mib} MiB"
        assert regained >= 0.8 * released, f"{label}: restore brought back only {regained} of {released} MiB"

    def _check_placement(self, label, where_before, where_after, device_map):
        if where_before is None or where_after is None or not all(where_before.values()):
            h.log(f"{label}: nvidia-smi does not list the ranks as compute processes; placement not checked")
            return
        moves = map_by_uuid(device_map, gpu_uuids(self.cli_env)) if device_map else {}
        want = {pid: {moves.get(u, u) for u in gpus} for pid, gpus in where_before.items()}
        h.log(f"{label}: ranks were on {where_before}, are on {where_after}, should be on {want}")
        assert where_after == want, f"{label}: ranks are on {where_after} after restore, expected {want}"


def heartbeat_workload(name, cycles, timeout_s, pg_timeout_s=None):
    """The NCCL workload with one rank per GPU (one GPU enough) whose heartbeat monitor's
    watchdog check (TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC) is `timeout_s`, and its process group's
    timeout (collectives and the TCPStore client) `pg_timeout_s` (default: the same), for the
    long-suspend tests (docs/LONG-SUSPEND.md). Not started."""
    pg_timeout_s = timeout_s if pg_timeout_s is None else pg_timeout_s
    workload = Workload(name, "nccl", cycles=cycles, min_ranks=1,
                        rank_args=["--pg-timeout-s", pg_timeout_s, "--allreduce-mib", 64,
                                   "--graph-mib", 16])
    workload.env.update({"TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC": str(timeout_s),
                         "TORCH_NCCL_ENABLE_MONITORING": "1",
                         "TORCH_NCCL_ASYNC_ERROR_HANDLING": "3"})
    return workload


def workload_ranks(env, minimum=2):
    """GPU_WORKLOAD_RANKS when set, else one rank per GPU; at least `minimum`."""
    wanted = os.environ.get("GPU_WORKLOAD_RANKS")
    ranks = int(wanted) if wanted else len(gpu_uuids(env))
    assert ranks >= minimum, f"this workload needs {minimum} GPU(s) or more; found {ranks}"
    return ranks


def rotation_by_index(ranks):
    """'0=1,1=2,...,n-1=0': every rank's GPU moves to the next one (a swap for two)."""
    return ",".join(f"{i}={(i + 1) % ranks}" for i in range(ranks))


def rotation_back_by_uuid(ranks, env):
    """The inverse of rotation_by_index, by GPU UUID: 'GPU-<i+1>=GPU-<i>' for every i."""
    uuids = gpu_uuids(env)
    assert len(uuids) >= ranks, f"{ranks} GPUs needed, UUIDs found: {uuids}"
    return ",".join(f"{uuids[(i + 1) % ranks]}={uuids[i]}" for i in range(ranks))


def map_by_uuid(device_map, uuids):
    """A --device-map ('a=b,...', GPUs by ordinal or UUID) as {from UUID: to UUID}."""
    def uuid(gpu):
        return uuids[int(gpu)] if gpu.isdigit() else gpu
    pairs = (item.split("=", 1) for item in device_map.split(",") if item)
    return {uuid(a.strip()): uuid(b.strip()) for a, b in pairs}


def native_cycle(pids, env, timeout=240):
    """Runs workload_native.py on `pids`: lock, checkpoint, restore, unlock through libcuda
    only. Returns its JSON ({"steps": {step: {pid: CUresult}}, "states": ...})."""
    done = h.run([sys.executable, NATIVE_SCRIPT, "--pids", ",".join(str(p) for p in pids)],
                 timeout, env, check=False)
    assert done.returncode == 0, f"workload_native.py exited with {done.returncode}"
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    assert lines, "workload_native.py printed no JSON result"
    return json.loads(lines[-1])


class RotatedCycles:
    """The cycles of a workload test, on one job and in order: in place, onto rotated GPUs by
    index (`--device-map 0=1,1=2,...,n-1=0`; for two GPUs `0=1,1=0`), and rotated back by
    UUID. A test module subclasses it as
    Test<Name> and sets NAME (the job's name in logs), PARTS (workload_rank.py --parts) and,
    where needed, ENV (entries for the ranks' environment). A failed cycle fails the later
    ones at once (Workload.broken)."""

    NAME = ""
    PARTS = ""
    ENV = {}

    @pytest.fixture(scope="class")
    def job(self):
        workload = Workload(self.NAME, self.PARTS, cycles=3)
        workload.env.update(self.ENV)
        try:
            workload.start()
            yield workload
        finally:
            workload.stop()

    def test_checkpoint_restore(self, job):
        job.run_cycle(1)

    def test_restore_rotated_by_index(self, job):
        job.run_cycle(2, device_map=rotation_by_index(job.ranks))

    def test_restore_rotated_back_by_uuid(self, job):
        job.run_cycle(3, device_map=rotation_back_by_uuid(job.ranks, job.cli_env))
