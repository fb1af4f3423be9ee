"""GPU: checkpoint and restore with `cusnap` of a two-process job that shares VMM
memory across two GPUs.

The job (gpu_pair_launcher -> gpu_share_checkpoint roles a and b, under `cusnap run`):
a creates allocations of GPU_SHARE_SIZES (default 64M,1G,4G) on GPU 0, b creates
GPU_SHARE_B_BYTES (default 256M) on GPU 1 (and GPU_SHARE_HOST_NUMA bytes of HOST_NUMA memory
when set); each imports and maps the other's, every byte checked. Then, GPU_SHARE_CYCLES
times (default 2): `cusnap checkpoint --pid <launcher> --state-dir D`, GPU memory read
(nvidia-smi, else cuMemGetInfo), `cusnap inspect D`, `cusnap restore --pid <launcher>
--state-dir D`, memory read again, and the job checks every byte on both sides, each VA's
range and logical handle, and sharing after restore (a writes, b reads; b writes, a reads).

GPU_SHARE_LAUNCH chooses how the shim gets in: "workers" (default) makes the launcher start
each role with `cusnap run --` (the launcher itself, no CUDA process, has no shim and no
endpoint); "tree" starts the launcher itself under `cusnap run`, so that every process of the
tree, the non-CUDA launcher included, carries the shim and an endpoint.

The CLI's per-phase lines are logged as they are printed.
"""

import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import gpu_harness as h  # noqa: E402

MIB = h.MIB
SETUP_TIMEOUT_S = 300
CLI_TIMEOUT_S = 300
ROUND_TIMEOUT_S = 300


def test_share_checkpoint_restore():
    sizes_text = os.environ.get("GPU_SHARE_SIZES", "64M,1G,4G")
    b_text = os.environ.get("GPU_SHARE_B_BYTES", "256M")
    host_numa_text = os.environ.get("GPU_SHARE_HOST_NUMA", "0")
    cycles = int(os.environ.get("GPU_SHARE_CYCLES", "2"))
    # GPU_SHARE_DEVICE_MAP (e.g. "0=1,1=0"): restore onto other GPUs; the job's memory then
    # comes back on the mapped GPUs (DRIVER-FACTS F7), so only the totals are compared.
    device_map = os.environ.get("GPU_SHARE_DEVICE_MAP", "")
    name = "share-" + os.environ.get("GPU_SHARE_NAME", "checkpoint")
    out = h.out_dir(name)
    control_dir = h.control_dir(name)
    state_dir = out / "state"
    env = h.job_env(control_dir, CUSNAP_LOG=os.environ.get("CUSNAP_LOG", "info"))
    cli_env = h.job_env(control_dir)
    cusnap = h.program("cusnap")

    # What each GPU should give back while the job is checkpointed (MiB).
    expect_mib = [sum(h.round_up(h.parse_size(s)) for s in sizes_text.split(",")) // MIB,
                  h.round_up(h.parse_size(b_text)) // MIB]
    launch = os.environ.get("GPU_SHARE_LAUNCH", "workers")
    assert launch in ("workers", "tree"), f"GPU_SHARE_LAUNCH={launch}: workers or tree"
    command = [h.program("gpu_pair_launcher"), "--stdin-to", "a"]
    command = [cusnap, "run", "--"] + command if launch == "tree" else command + ["--via-cusnap", cusnap]
    command += ["--", h.program("gpu_share_checkpoint"), "--sizes", sizes_text, "--b-bytes", b_text,
                "--host-numa-bytes", host_numa_text]
    job = h.Job(command, env, "job")
    problems = []
    try:
        job.wait_for(r"@@READY", SETUP_TIMEOUT_S)
        for cycle in range(1, cycles + 1):
            h.log(f"---- cycle {cycle} of {cycles}: checkpoint, restore, verify ----")
            before, source = h.memory_used_mib(env)
            h.log(f"GPU memory used before checkpoint ({source}): {before} MiB")
            h.run([cusnap, "checkpoint", "--pid", job.pid, "--state-dir", state_dir], CLI_TIMEOUT_S, cli_env)
            during, _ = h.memory_used_mib(env)
            h.log(f"GPU memory used while checkpointed: {during} MiB")
            inspected = h.run([cusnap, "inspect", state_dir], CLI_TIMEOUT_S, cli_env, check=False)
            if inspected.returncode != 0:
                problems.append(f"cusnap inspect exited with {inspected.returncode}")
            restore = [cusnap, "restore", "--pid", job.pid, "--state-dir", state_dir]
            if device_map:
                restore += ["--device-map", device_map]
            h.run(restore, CLI_TIMEOUT_S, cli_env)
            after, _ = h.memory_used_mib(env)
            h.log(f"GPU memory used after restore: {after} MiB")
            for gpu in range(2):
                released = before[gpu] - during[gpu]
                regained = after[gpu] - during[gpu]
                h.log(f"GPU {gpu}: released {released} MiB at checkpoint, regained {regained} MiB at "
                      f"restore; the job's shared allocations there: {expect_mib[gpu]} MiB")
                if released < expect_mib[gpu] * 0.9:
                    problems.append(f"cycle {cycle}: GPU {gpu} released only {released} MiB of "
                                    f"{expect_mib[gpu]} MiB")
                if not device_map and regained < expect_mib[gpu] * 0.9:
                    problems.append(f"cycle {cycle}: GPU {gpu} regained only {regained} MiB of "
                                    f"{expect_mib[gpu]} MiB")
            if device_map:
                regained_total = sum(after) - sum(during)
                h.log(f"device map {device_map}: regained {regained_total} MiB in all; per GPU "
                      f"before {before}, after {after}")
                if regained_total < sum(expect_mib) * 0.9:
                    problems.append(f"cycle {cycle}: regained only {regained_total} MiB of "
                                    f"{sum(expect_mib)} MiB with device map {device_map}")
            job.send("verify")
            verdict = job.wait_for(r"@@ROUND (\d+) (PASS|FAIL)", ROUND_TIMEOUT_S)
            assert verdict.group(2) == "PASS", f"cycle {cycle}: bytes or sharing wrong after restore"
        job.send("quit")
        done = job.wait_for(r"@@DONE (PASS|FAIL)", ROUND_TIMEOUT_S)
        status = job.finish(120)
        assert done.group(1) == "PASS" and status == 0, f"the job ended with status {status}"
    finally:
        job.kill()
    assert not problems, "; ".join(problems)
    h.log(f"PASS: {cycles} checkpoint/restore cycle(s), every byte and the sharing verified")


if __name__ == "__main__":
    test_share_checkpoint_restore()
