"""The hold after a command (GPU; docs/LONG-SUSPEND.md, shim/lifecycle/lifecycle.h): the NCCL
workload (workload_rank.py --parts nccl) checkpointed under the default hold (every rank
stopped), then a `cusnap restore` killed with SIGKILL after it continued the ranks (paused at
its match phase by the test-only knob CUSNAP_TEST_PAUSE_AT, cli/test_pause.h). Before the
hold after a command, the ranks then ran on with their memory gone, and PyTorch's heartbeat
monitor aborted them once their watchdog had waited TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC twice.
Now each rank stops itself again, its hold marker first, once it ran one lease
(CUSNAP_LEASE_MS, GPU_KILLED_RESTORE_LEASE_MS: 5 s) with no command at work. The job is then
held GPU_KILLED_RESTORE_HOLD_S (75 s, over twice the 30 s heartbeat timeout), every rank
stopped throughout, and the next `cusnap restore` brings it back: kept results and fresh
collectives exact, DONE PASS, launcher exit 0. The launcher (torchrun's agent) is held again
as the checkpoint left it. One GPU is enough (a one-rank process group has the watchdog and
the monitor too). The process group's timeout is 600 s (GPU_KILLED_RESTORE_PG_TIMEOUT_S):
with 30 s, the captured all_reduce still listed when the job was held timed out at the
restore (a limit of any hold, docs/LONG-SUSPEND.md, "After the restore").
"""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
import gpu_harness as h  # noqa: E402
import workload_common as wc  # noqa: E402

TIMEOUT_S = int(os.environ.get("GPU_LONG_SUSPEND_TIMEOUT_S", "30"))
HOLD_S = int(os.environ.get("GPU_KILLED_RESTORE_HOLD_S", "75"))
PG_TIMEOUT_S = int(os.environ.get("GPU_KILLED_RESTORE_PG_TIMEOUT_S", "600"))
LEASE_MS = int(os.environ.get("GPU_KILLED_RESTORE_LEASE_MS", "5000"))
PAUSE_AT = "restore:match:after"


@pytest.fixture(scope="module")
def job():
    # The process group's timeout stays long: a collective listed when the job was held times
    # out at the restore whatever the hold (docs/LONG-SUSPEND.md, "After the restore"); this
    # test is about the heartbeat monitor, which fires while a job runs unheld.
    workload = wc.heartbeat_workload("killed-restore", cycles=1, timeout_s=TIMEOUT_S,
                                     pg_timeout_s=PG_TIMEOUT_S)
    workload.cli_env.update({"CUSNAP_HOLD": "stop", "CUSNAP_LEASE_MS": str(LEASE_MS)})
    try:
        workload.start()
        yield workload
    finally:
        workload.stop()


def kill_restore_when_paused(job, label):
    """Starts `cusnap restore` paused at PAUSE_AT (it continued the held ranks before), waits
    until it stopped itself there, and kills it with SIGKILL."""
    env = dict(job.cli_env)
    env["CUSNAP_TEST_PAUSE_AT"] = PAUSE_AT
    command = [h.program("cusnap"), "restore", "--pid", str(job.job.pid), "--state-dir",
               str(job.state_dir)]
    cli = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           text=True)
    deadline = time.monotonic() + wc.CLI_TIMEOUT_S
    while h.proc_state(cli.pid) != "T" and cli.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    paused = h.proc_state(cli.pid) == "T"
    cli.send_signal(signal.SIGKILL)
    out, err = cli.communicate(timeout=wc.CLI_TIMEOUT_S)
    h.log(f"{label}: cusnap restore killed at {PAUSE_AT} (exit {cli.returncode})\n{out}{err}")
    assert paused, f"{label}: cusnap restore never paused at {PAUSE_AT}: {err}"


def test_a_restore_killed_after_it_continued_the_job_leaves_it_held(job):
    label = "killed-restore"
    pids = list(job.pids.values())
    ck = wc.cusnap(["checkpoint", "--pid", job.job.pid, "--state-dir", job.state_dir],
                   job.cli_env, f"{label} checkpoint")
    assert ck.returncode == 0, f"{label}: cusnap checkpoint exited with {ck.returncode}"
    assert all(h.proc_state(p) == "T" for p in pids), f"{label}: ranks not held after checkpoint"
    # torchrun's agent initializes CUDA (the driver knows it): held like the ranks, then.
    launcher = h.proc_state(job.job.pid)

    kill_restore_when_paused(job, label)
    continued = {p: h.proc_state(p) for p in pids}
    h.log(f"{label}: rank states right after the kill: {continued}")
    started = time.monotonic()
    markers = [Path(job.control) / f"{p}.held" for p in pids]
    while time.monotonic() - started < 3 * LEASE_MS / 1000 + 10:
        if all(h.proc_state(p) == "T" for p in pids) and all(m.exists() for m in markers):
            break
        time.sleep(0.1)
    took = time.monotonic() - started
    states = {p: h.proc_state(p) for p in pids}
    h.log(f"{label}: ranks held again {took:.1f} s after the kill (lease {LEASE_MS} ms): {states}")
    assert all(st == "T" for st in states.values()), f"{label}: ranks run on, not held: {states}"
    assert all(m.exists() for m in markers), f"{label}: hold markers missing: {markers}"
    assert h.proc_state(job.job.pid) == launcher, \
        f"{label}: the launcher is {h.proc_state(job.job.pid)}, the checkpoint left it {launcher}"

    st = wc.cusnap(["status", "--pid", job.job.pid], job.cli_env, f"{label} status")
    assert st.returncode == 0, f"{label}: cusnap status exited with {st.returncode}"
    job._hold(label, HOLD_S, hold_stops=True)  # longer than the heartbeat monitor's two checks

    rs = wc.cusnap(["restore", "--pid", job.job.pid, "--state-dir", job.state_dir], job.cli_env,
                   f"{label} restore")
    assert rs.returncode == 0, f"{label}: cusnap restore exited with {rs.returncode}"
    job.go(1)
    job.finish()
    job.check_round(1)
    h.log(f"{label}: PASS")


if __name__ == "__main__":
    sys.exit(pytest.main(["-s", "-v", "-p", "no:cacheprovider", __file__]))
