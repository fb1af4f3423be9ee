"""Shared helpers of the real-GPU pytest files in tests/gpu (run by tests/gpu/run_all.sh).

Configuration comes from the environment run_all.sh sets:
  CUSNAP_GPU_BUILD   the build folder (bin/cusnap, bin/gpu_*, lib/libcusnap.so)
  CUSNAP_GPU_OUT     where state directories and logs go
  CUSNAP_GPU_CTL     a short folder (under /tmp) for control directories: a Unix socket path
                     must stay under 108 bytes, and $OUT may be long
Every child process gets NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1
NVSHMEM_DISABLE_NVLS=1 whatever its caller's environment says (DRIVER-FACTS, machine notes).
"""

import json
import os
import queue
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

# Never multicast on the project's machines (DRIVER-FACTS F9 and machine notes).
NO_MULTICAST = {
    "NCCL_NVLS_ENABLE": "0",
    "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
    "NVSHMEM_DISABLE_NVLS": "1",
}


def log(message):
    """One harness line, flushed at once so that it interleaves correctly with children."""
    print(f"[harness] {message}", flush=True)


def build_dir():
    """The build folder from CUSNAP_GPU_BUILD; pytest skips when it is not set."""
    value = os.environ.get("CUSNAP_GPU_BUILD")
    if not value:
        import pytest  # only when run under pytest without run_all.sh

        pytest.skip("CUSNAP_GPU_BUILD is not set: run tests/gpu/run_all.sh <build dir>")
    return Path(value)


def out_dir(name):
    """A fresh folder <CUSNAP_GPU_OUT>/<name> (default ./gpu-out/<name>)."""
    path = Path(os.environ.get("CUSNAP_GPU_OUT", "gpu-out")).resolve() / name
    shutil.rmtree(path, ignore_errors=True)
    path.mkdir(parents=True, mode=0o700)
    return path


def control_dir(name):
    """A fresh, private (0700) control directory for one test's endpoints."""
    root = Path(os.environ.get("CUSNAP_GPU_CTL") or f"/tmp/cusnap-gpu-{os.getuid()}")
    path = root / name
    shutil.rmtree(path, ignore_errors=True)
    path.mkdir(parents=True, mode=0o700)
    return path


def program(name):
    """Path of a built program in <build>/bin; fails naming the CMake option when missing."""
    path = build_dir() / "bin" / name
    assert path.exists(), f"{path} is missing: configure with -DCUSNAP_BUILD_GPU_TESTS=ON and build"
    return str(path)


def job_env(control_dir=None, **extra):
    """The environment of a child: ours, the no-multicast settings forced, a private control
    directory when given, then `extra` (a value of None removes the variable)."""
    env = dict(os.environ)
    env.update(NO_MULTICAST)
    env.setdefault("CUDA_DEVICE_ORDER", "PCI_BUS_ID")
    if control_dir is not None:
        env["CUSNAP_CONTROL_DIR"] = str(control_dir)
    for key, value in extra.items():
        if value is None:
            env.pop(key, None)
        else:
            env[key] = str(value)
    env.update(NO_MULTICAST)
    return env


def run(command, timeout, env=None, check=True):
    """Runs a command to completion, logs it and its output; returns the CompletedProcess.
    With check, a non-zero exit status fails the test naming the command."""
    log("$ " + " ".join(str(c) for c in command))
    start = time.monotonic()
    try:
        done = subprocess.run([str(c) for c in command], env=env or job_env(), timeout=timeout,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    except subprocess.TimeoutExpired as e:
        output = e.stdout if isinstance(e.stdout, str) else (e.stdout or b"").decode(errors="replace")
        sys.stdout.write(output)
        raise AssertionError(f"{command[0]} did not finish within {timeout} s") from None
    sys.stdout.write(done.stdout)
    if done.stdout and not done.stdout.endswith("\n"):
        sys.stdout.write("\n")
    log(f"exit status {done.returncode} after {time.monotonic() - start:.2f} s")
    if check:
        assert done.returncode == 0, f"{' '.join(map(str, command))} exited with {done.returncode}"
    return done


class Job:
    """A background process whose output lines are logged with a prefix as they come and
    kept for wait_for(); its standard input is a pipe for commands."""

    def __init__(self, command, env, name):
        self.name = name
        log(f"start {name}: " + " ".join(str(c) for c in command))
        self.process = subprocess.Popen([str(c) for c in command], env=env, text=True,
                                        stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                        stderr=subprocess.STDOUT, bufsize=1)
        self.pid = self.process.pid
        self.lines = queue.Queue()
        self.history = []
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self):
        for line in self.process.stdout:
            line = line.rstrip("\n")
            print(f"  {self.name}| {line}", flush=True)
            self.history.append(line)
            self.lines.put(line)
        self.lines.put(None)  # end of output

    def wait_for(self, pattern, timeout):
        """The first match of regex `pattern` in the lines not yet consumed; fails on timeout
        or when the process ends first."""
        deadline = time.monotonic() + timeout
        regex = re.compile(pattern)
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"{self.name}: no line matching {pattern!r} within {timeout} s")
            try:
                line = self.lines.get(timeout=left)
            except queue.Empty:
                continue
            if line is None:
                self.lines.put(None)
                raise AssertionError(f"{self.name} ended (status {self.process.wait()}) before a line "
                                     f"matching {pattern!r}")
            match = regex.search(line)
            if match:
                return match

    def send(self, line):
        log(f"to {self.name}: {line}")
        self.process.stdin.write(line + "\n")
        self.process.stdin.flush()

    def finish(self, timeout):
        """Closes stdin and waits for the exit status (killing the process group on timeout)."""
        try:
            self.process.stdin.close()
        except OSError:
            pass
        try:
            status = self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.log_threads()
            self.kill()
            raise AssertionError(f"{self.name} did not exit within {timeout} s") from None
        self.reader.join(timeout=10)
        log(f"{self.name} exited with status {status}")
        return status

    def log_threads(self):
        """Logs every thread of the job's processes (name, kernel wait channel, top of the
        kernel stack) so a hang says where it waits."""
        for pid in descendants(self.pid) + [self.pid]:
            try:
                tids = sorted(os.listdir(f"/proc/{pid}/task"), key=int)
            except OSError:
                continue
            for tid in tids:
                def read(name):
                    try:
                        with open(f"/proc/{pid}/task/{tid}/{name}") as f:
                            return f.read().strip()
                    except OSError:
                        return "?"
                stack = " < ".join(line.split()[-1] for line in read("stack").splitlines()[:4])
                log(f"hung {self.name}: pid {pid} tid {tid} {read('comm')!r} wchan {read('wchan')} "
                    f"stack {stack}")
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    if b"workload_rank.py" in f.read():
                        os.kill(pid, signal.SIGUSR1)  # faulthandler prints its Python stacks
                        time.sleep(1)
            except OSError:
                pass
            stack_tool = os.environ.get("CUSNAP_GPU_STACK_TOOL")  # e.g. a carried eu-stack
            if stack_tool and os.path.exists(stack_tool):
                tool_env = dict(os.environ)
                tool_env["LD_LIBRARY_PATH"] = str(Path(stack_tool).resolve().parent / "lib")
                try:
                    bt = subprocess.run([stack_tool, "-i", "-p", str(pid)], stdout=subprocess.PIPE,
                                        stderr=subprocess.STDOUT, text=True, timeout=60,
                                        env=tool_env).stdout
                except (subprocess.TimeoutExpired, OSError) as e:
                    bt = f"{stack_tool} failed: {e}"
                for line in bt.splitlines():
                    log(f"hung {self.name}: pid {pid} | {line[:240]}")
            elif shutil.which("gdb"):
                try:
                    bt = subprocess.run(["gdb", "-p", str(pid), "-batch", "-nx", "-ex",
                                         "thread apply all bt 12"], stdout=subprocess.PIPE,
                                        stderr=subprocess.STDOUT, text=True, timeout=60).stdout
                except (subprocess.TimeoutExpired, OSError) as e:
                    bt = f"gdb failed: {e}"
                for line in bt.splitlines():
                    if line.startswith(("Thread ", "#")):
                        log(f"hung {self.name}: pid {pid} | {line[:200]}")

    def kill(self):
        """Kills the job and every process under it (by pid, children first). The job stays
        in the harness's process group, so run_all.sh's `timeout` reaches it as well."""
        if self.process.poll() is not None:
            return
        for pid in descendants(self.pid) + [self.pid]:
            log(f"killing pid {pid} (part of {self.name})")
            try:
                os.kill(pid, 9)
            except OSError:
                pass
        self.process.wait(timeout=30)


def descendants(pid):
    """Pids of every process under `pid`, deepest first (from /proc/<pid>/stat)."""
    children = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(entry))
    order = []

    def walk(p):
        for child in children.get(p, []):
            walk(child)
            order.append(child)

    walk(pid)
    return order


MIB = 1 << 20


def proc_state(pid):
    """The state letter of `pid` from /proc/<pid>/stat (R, S, D, T stopped, Z, ...), None when
    it does not exist."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return None


def await_reaped(pids, timeout, what):
    """Waits until none of `pids` exists, not even as a zombie, reaping what this process (a
    subreaper) inherited meanwhile: CRIU gives restored processes their pids back. Raises
    AssertionError "<what>: [pids left]" after `timeout` s."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            while os.waitpid(-1, os.WNOHANG)[0] > 0:
                pass
        except ChildProcessError:
            pass
        left = [p for p in pids if proc_state(p) is not None]
        if not left:
            return
        if time.monotonic() >= deadline:
            raise AssertionError(f"{what}: {left}")
        time.sleep(0.2)


def parse_size(text):
    """'64M', '1G', '512K' or a plain byte count -> bytes."""
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    text = text.strip()
    return int(text[:-1]) * units[text[-1].upper()] if text[-1].upper() in units else int(text)


def round_up(value, granule=2 * MIB):
    """`value` rounded up to the allocation granularity (2 MiB on our GPUs)."""
    return (value + granule - 1) // granule * granule


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def memory_used_mib(env):
    """Memory in use per GPU (MiB), by CUDA ordinal under CUDA_DEVICE_ORDER=PCI_BUS_ID:
    nvidia-smi where present, else gpu_meminfo (cuMemGetInfo from a context of its own)."""
    if shutil.which("nvidia-smi") and env.get("CUSNAP_GPU_SIM") != "1":
        out = subprocess.run(["nvidia-smi", "--query-gpu=index,memory.used", "--format=csv,noheader,nounits"],
                             stdout=subprocess.PIPE, text=True, timeout=60, check=True).stdout
        rows = [line.split(",") for line in out.strip().splitlines()]
        return [int(used) for _, used in sorted((int(i), u) for i, u in rows)], "nvidia-smi"
    out = subprocess.run([program("gpu_meminfo")], env=env, stdout=subprocess.PIPE, text=True,
                         timeout=60, check=True).stdout
    used = [int(m.group(1)) for m in re.finditer(r"used_mib (\d+)", out)]
    return used, "cuMemGetInfo (gpu_meminfo)"


def inspect_endpoint(pid, env):
    """kIdentify + kInspect counts of one process's endpoint (gpu_inspect's JSON line)."""
    done = run([program("gpu_inspect"), "--pid", pid], timeout=60, env=env)
    return json.loads(done.stdout.strip().splitlines()[-1])
