"""GPU: how the checkpoint and restore phases scale with the number of processes
that share VMM memory.

The job (gpu_pair_launcher --ranks N -> gpu_share_ring, each rank under `cusnap run`):
GPU_RING_PROCESSES ranks (default 2), rank r on GPU r % <GPU count>, each creating
GPU_RING_ALLOCATIONS (default 8) POSIX-capable allocations of GPU_RING_BYTES (default 2M),
every allocation imported and mapped by every other rank, every byte checked. Then one cycle:
`cusnap checkpoint --json`, GPU memory read (nvidia-smi, else cuMemGetInfo), `cusnap restore
--json`, memory read again, and the job checks every byte of all N * N * K mappings, each VA's
range and logical handle, and sharing after restore (every rank rewrites its own allocations,
every other rank reads them back through its imports).

Logged: every phase's elapsed ms, participants, bytes and carrier rates, then one line
  RING N=<n> allocations=<N*K> mappings=<N*N*K> bytes=<N*K*S> inspect=<ms> validate=<ms>
  quiesce=<ms> release=<ms> import=<ms> verify=<ms> checkpoint=<ms> restore=<ms> save=<ms>
  reallocate=<ms> save_gbps=<GB/s> save_copy_gbps=<GB/s> reallocate_gbps=<GB/s>
  reallocate_copy_gbps=<GB/s> checkpoint_cmd=<ms> restore_cmd=<ms>
(the phase names are the CLI's; checkpoint and restore there are the native phases; a
carrier's _gbps is its whole phase's rate, host registration included, _copy_gbps the copies'
alone; checkpoint_cmd and restore_cmd the sums of every phase of each command). run_all.sh's
share_ring test runs this for N = 2, 4, 8 and gathers the RING lines; the same numbers go
to <CUSNAP_GPU_OUT>/share-ring-<n>/phases.json.
"""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import gpu_harness as h  # noqa: E402

MIB = h.MIB
SETUP_TIMEOUT_S = 180
CLI_TIMEOUT_S = 180
ROUND_TIMEOUT_S = 180

# The phases of the RING line, in order: the topology phases, then the native and carrier ones.
SUMMARY_PHASES = ("inspect", "validate", "quiesce", "release", "import", "verify", "checkpoint", "restore",
                  "save", "reallocate")


def run_json(command, env):
    """Runs a `cusnap ... --json` command; logs its stderr and document; returns the parsed
    document (stdout holds nothing else) and the command's wall time in ms."""
    h.log("$ " + " ".join(str(c) for c in command))
    start = time.monotonic()
    done = subprocess.run([str(c) for c in command], env=env, timeout=CLI_TIMEOUT_S, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True)
    wall_ms = (time.monotonic() - start) * 1000
    for line in done.stderr.splitlines():
        h.log(f"stderr| {line}")
    try:
        doc = json.loads(done.stdout)
    except json.JSONDecodeError:
        sys.stdout.write(done.stdout)
        raise AssertionError(f"{command[1]} --json printed no JSON document (exit status {done.returncode})")
    for p in doc["phases"]:
        rate = f"  {p['bytes']} bytes  {p['gb_per_s']:.2f} GB/s" if p["bytes"] else ""
        if p["copy_gb_per_s"]:
            rate += f" (copies {p['copy_gb_per_s']:.2f} GB/s)"
        h.log(f"PHASE {command[1]:<10} {p['name']:<16} {p['elapsed_ms']:9.1f} ms  "
              f"{p['participants']} participants{rate}{'' if p['ok'] else '  FAILED ' + str(p['errors'])}")
    h.log(f"{command[1]}: exit status {done.returncode}, outcome {doc.get('outcome')}, {wall_ms:.1f} ms wall")
    assert done.returncode == 0 and doc.get("outcome") == "ok", \
        f"cusnap {command[1]} failed (exit status {done.returncode}): {doc.get('errors')}"
    return doc, wall_ms


def phase(docs, name):
    """The one phase called `name` in the checkpoint or restore document."""
    found = [p for doc in docs for p in doc["phases"] if p["name"] == name]
    assert len(found) == 1, f"phase {name}: found {len(found)} times in the checkpoint and restore reports"
    return found[0]


def test_share_ring():
    ranks = int(os.environ.get("GPU_RING_PROCESSES", "2"))
    per_rank = int(os.environ.get("GPU_RING_ALLOCATIONS", "8"))
    bytes_text = os.environ.get("GPU_RING_BYTES", "2M")
    assert ranks >= 2 and per_rank >= 1, f"GPU_RING_PROCESSES={ranks} (>= 2), GPU_RING_ALLOCATIONS={per_rank} (>= 1)"
    allocation_bytes = h.round_up(h.parse_size(bytes_text))
    name = f"share-ring-{ranks}"
    out = h.out_dir(name)
    control_dir = h.control_dir(name)
    state_dir = out / "state"
    # On the simulated driver, a machine of its own (memory ledger, checkpoint service): the
    # memory read below must not count other jobs of this user on the same CPU machine.
    sim_dir = {"SIMCUDA_DIR": control_dir / "sim"} if os.environ.get("CUSNAP_GPU_SIM") == "1" else {}
    env = h.job_env(control_dir, **sim_dir)
    cusnap = h.program("cusnap")

    before, source = h.memory_used_mib(env)
    gpus = len(before)
    # What each GPU should give back while the job is checkpointed (MiB): rank r is on GPU r % gpus.
    expect_mib = [sum(per_rank * allocation_bytes for r in range(ranks) if r % gpus == g) // MIB
                  for g in range(gpus)]
    h.log(f"{ranks} ranks on {gpus} GPUs, {per_rank} allocations of {allocation_bytes} bytes each: "
          f"{ranks * per_rank} allocations, {ranks * ranks * per_rank} mappings; per GPU {expect_mib} MiB")

    command = [h.program("gpu_pair_launcher"), "--stdin-to", "a", "--ranks", ranks, "--via-cusnap", cusnap,
               "--", h.program("gpu_share_ring"), "--allocations", per_rank, "--bytes", bytes_text]
    started = time.monotonic()
    job = h.Job(command, env, "job")
    problems = []
    try:
        job.wait_for(r"@@READY", SETUP_TIMEOUT_S)
        h.log(f"job ready after {time.monotonic() - started:.2f} s")
        before, source = h.memory_used_mib(env)
        h.log(f"GPU memory used before checkpoint ({source}): {before} MiB")
        checkpoint, checkpoint_wall = run_json(
            [cusnap, "checkpoint", "--pid", job.pid, "--state-dir", state_dir, "--json"], env)
        during, _ = h.memory_used_mib(env)
        h.log(f"GPU memory used while checkpointed: {during} MiB")
        restore, restore_wall = run_json(
            [cusnap, "restore", "--pid", job.pid, "--state-dir", state_dir, "--json"], env)
        after, _ = h.memory_used_mib(env)
        h.log(f"GPU memory used after restore: {after} MiB")
        for gpu in range(gpus):
            released, regained = before[gpu] - during[gpu], after[gpu] - during[gpu]
            h.log(f"GPU {gpu}: released {released} MiB at checkpoint, regained {regained} MiB at restore; "
                  f"the job's allocations there: {expect_mib[gpu]} MiB")
            if released < expect_mib[gpu] * 0.9:
                problems.append(f"GPU {gpu} released only {released} MiB of {expect_mib[gpu]} MiB")
            if regained < expect_mib[gpu] * 0.9:
                problems.append(f"GPU {gpu} regained only {regained} MiB of {expect_mib[gpu]} MiB")

        job.send("verify")
        verdict = job.wait_for(r"@@ROUND (\d+) (PASS|FAIL)", ROUND_TIMEOUT_S)
        assert verdict.group(2) == "PASS", "bytes or sharing wrong after restore"
        job.send("quit")
        done = job.wait_for(r"@@DONE (PASS|FAIL)", ROUND_TIMEOUT_S)
        status = job.finish(60)
        assert done.group(1) == "PASS" and status == 0, f"the job ended with status {status}"
    finally:
        job.kill()

    docs = (checkpoint, restore)
    total_bytes = ranks * per_rank * allocation_bytes
    for p in (phase(docs, "inspect"), phase(docs, "save"), phase(docs, "reallocate"), phase(docs, "verify")):
        if p["participants"] != ranks:
            problems.append(f"phase {p['name']}: {p['participants']} participants, expected {ranks}")
    for carrier in ("save", "reallocate"):
        if phase(docs, carrier)["bytes"] != total_bytes:
            problems.append(f"phase {carrier} moved {phase(docs, carrier)['bytes']} bytes, expected {total_bytes}")
    assert not problems, "; ".join(problems)

    fields = [f"N={ranks}", f"allocations={ranks * per_rank}", f"mappings={ranks * ranks * per_rank}",
              f"bytes={total_bytes}"]
    fields += [f"{n}={phase(docs, n)['elapsed_ms']:.1f}" for n in SUMMARY_PHASES]
    for carrier in ("save", "reallocate"):
        fields += [f"{carrier}_gbps={phase(docs, carrier)['gb_per_s']:.2f}",
                   f"{carrier}_copy_gbps={phase(docs, carrier)['copy_gb_per_s']:.2f}"]
    fields += [f"checkpoint_cmd={sum(p['elapsed_ms'] for p in checkpoint['phases']):.1f}",
               f"restore_cmd={sum(p['elapsed_ms'] for p in restore['phases']):.1f}"]
    (out / "phases.json").write_text(json.dumps({
        "processes": ranks, "gpus": gpus, "allocations_per_process": per_rank, "allocation_bytes": allocation_bytes,
        "checkpoint": checkpoint, "restore": restore,
        "checkpoint_wall_ms": checkpoint_wall, "restore_wall_ms": restore_wall}, indent=2))
    print("\nRING " + " ".join(fields), flush=True)
    h.log(f"PASS: {ranks} ranks, checkpoint and restore, every byte and the sharing verified")


if __name__ == "__main__":
    test_share_ring()
