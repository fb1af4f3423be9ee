"""GPU: the shim preloaded into a 2-rank PyTorch + NCCL all_reduce changes no result,
and its tables show the NCCL allocations tracked (DRIVER-FACTS: about 147 cuMemCreate per
rank, all POSIX-capable, 2 of them HOST_NUMA).

The ranks run once without the shim and once under `cusnap run`; their RESULT lines must be
identical. While the shimmed ranks wait after their all_reduce, the test asks each rank's
endpoint for its table (gpu_inspect: kIdentify + kInspect) and runs `cusnap status --pid
<rank pid> --json`.

Thresholds (environment): GPU_NCCL_MIN_TRACKED (default 16) allocations per rank, at least
one HOST_NUMA and one imported allocation per rank, no untracked import.
"""

import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import gpu_harness as h  # noqa: E402

RANK_SCRIPT = Path(__file__).resolve().parent / "nccl_rank.py"
STARTUP_TIMEOUT_S = 300


def run_ranks(shim, control_dir):
    """Starts both ranks (under `cusnap run` when `shim`), returns (jobs, pids of the paused
    ranks or None, RESULT lines by rank)."""
    port = h.free_port()
    jobs = []
    for rank in range(2):
        env = h.job_env(control_dir, MASTER_ADDR="127.0.0.1", MASTER_PORT=port, RANK=rank,
                        WORLD_SIZE=2, LOCAL_RANK=rank, NCCL_DEBUG=os.environ.get("NCCL_DEBUG", "INFO"))
        command = [sys.executable, RANK_SCRIPT]
        if shim:
            command = [h.program("cusnap"), "run", "--"] + command
        else:
            command.append("--no-pause")
            env.pop("LD_PRELOAD", None)
        jobs.append(h.Job(command, env, f"{'shim' if shim else 'plain'} rank {rank}"))
    return jobs


def results_of(job):
    return [line for line in job.history if line.startswith("RESULT")]


def check_tables(pid, env):
    """Asserts what the shim tracks in one paused rank; returns the counts."""
    counts = h.inspect_endpoint(pid, env)
    h.log(f"rank pid {pid}: {counts['allocations']} tracked allocations ({counts['created']} created "
          f"here, {counts['imported']} imported; {counts['device']} DEVICE, {counts['host_numa']} "
          f"HOST_NUMA, {counts['other_location']} other), {counts['mappings']} mappings, "
          f"{counts['created_bytes']} bytes created, {counts['untracked_imports']} untracked imports, "
          f"phase {counts['phase']}; over its life {counts['created_total']} tracked creates, "
          f"{counts['created_host_numa']} of them HOST_NUMA")
    minimum = int(os.environ.get("GPU_NCCL_MIN_TRACKED", "16"))
    assert counts["allocations"] >= minimum, f"pid {pid}: only {counts['allocations']} tracked allocations"
    # NCCL creates and exports its HOST_NUMA buffers during setup and may release them before
    # the pause (DRIVER-FACTS: 2 per rank); what must hold is that they were tracked.
    assert counts["created_host_numa"] >= 1, f"pid {pid}: no HOST_NUMA allocation was ever tracked"
    assert counts["imported"] >= 1, f"pid {pid}: no imported allocation tracked"
    assert counts["untracked_imports"] == 0, f"pid {pid}: untracked imports"
    return counts


def check_status(pid, env, counts):
    """`cusnap status --pid <pid> --json`: exit 0, one JSON document, and the same number of
    allocations as the endpoint's table. Returns a problem sentence or None."""
    done = h.run([h.program("cusnap"), "status", "--pid", pid, "--json"], timeout=60, env=env, check=False)
    if done.returncode != 0:
        return f"cusnap status --pid {pid} --json exited with {done.returncode}"
    try:
        status = json.loads(done.stdout)
    except ValueError as e:
        return f"cusnap status --pid {pid} --json printed no valid JSON ({e})"
    shown = [p.get("allocations") for p in status.get("participants", []) if p.get("pid") == pid]
    h.log(f"cusnap status shows pid {pid} with {shown} allocations; its endpoint listed {counts['allocations']}")
    if shown != [counts["allocations"]]:
        return f"cusnap status shows {shown} allocations for pid {pid}, its endpoint {counts['allocations']}"
    return None


def test_nccl_allreduce_same_with_and_without_shim():
    h.log("baseline: both ranks without the shim")
    plain = run_ranks(False, None)
    try:
        for job in plain:
            assert job.finish(STARTUP_TIMEOUT_S) == 0, f"{job.name} failed without the shim"
    finally:
        for job in plain:
            job.kill()
    plain_results = [results_of(job) for job in plain]

    h.log("the same under `cusnap run`")
    control_dir = h.control_dir("nccl")
    env = h.job_env(control_dir)
    shim = run_ranks(True, control_dir)
    problems = []
    try:
        pids = [int(job.wait_for(r"PAUSED pid=(\d+)", STARTUP_TIMEOUT_S).group(1)) for job in shim]
        for pid in pids:
            counts = check_tables(pid, env)
            problem = check_status(pid, env, counts)
            if problem:
                problems.append(problem)
        for job in shim:
            job.send("go")
        for job in shim:
            assert job.finish(120) == 0, f"{job.name} failed under the shim"
    finally:
        for job in shim:
            job.kill()
    shim_results = [results_of(job) for job in shim]

    for rank in range(2):
        h.log(f"rank {rank} without the shim: {plain_results[rank]}")
        h.log(f"rank {rank} under the shim:   {shim_results[rank]}")
        assert plain_results[rank], f"rank {rank} printed no RESULT line"
        assert plain_results[rank] == shim_results[rank], f"rank {rank}: results differ with the shim"
    assert not problems, "; ".join(problems)
    h.log("PASS: identical results, NCCL allocations tracked on both ranks")


if __name__ == "__main__":
    test_nccl_allreduce_same_with_and_without_shim()
