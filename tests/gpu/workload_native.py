"""Native CUDA checkpoint of other processes, nothing else: cuCheckpointProcessLock,
cuCheckpointProcessCheckpoint, cuCheckpointProcessRestore and cuCheckpointProcessUnlock on
every pid in turn (each step on all pids before the next), through libcuda.so.1 with
ctypes, and cuCheckpointProcessGetState after each step. This is what a job gets without
cusnap (DRIVER-FACTS F8); test_workload_nccl_native.py compares it with cusnap.

    python3 workload_native.py --pids 1234,1235 [--lock-timeout-ms 60000]

Prints one line per call ("NATIVE <step> pid=<pid> rc=<CUresult> <name> state=<state>") and,
last, one JSON line: {"steps": {"lock": {"<pid>": rc, ...}, ...}, "states": {...}}. A step
after a failed one is still tried on every pid (to show what the driver says), except that
nothing is tried on a pid whose lock failed. Exit status 0 whatever the driver answered
(the caller judges), 2 when libcuda could not be used.
"""

import argparse
import ctypes
import json
import sys

CU_RESULT_NAMES = {0: "CUDA_SUCCESS", 1: "CUDA_ERROR_INVALID_VALUE", 3: "CUDA_ERROR_NOT_INITIALIZED",
                   201: "CUDA_ERROR_INVALID_CONTEXT", 400: "CUDA_ERROR_INVALID_HANDLE",
                   401: "CUDA_ERROR_ILLEGAL_STATE", 700: "CUDA_ERROR_ILLEGAL_ADDRESS",
                   801: "CUDA_ERROR_NOT_SUPPORTED", 909: "CUDA_ERROR_TIMEOUT", 999: "CUDA_ERROR_UNKNOWN"}
STATE_NAMES = {0: "RUNNING", 1: "LOCKED", 2: "CHECKPOINTED", 3: "FAILED"}  # CUprocessState


class LockArgs(ctypes.Structure):  # CUcheckpointLockArgs (cuda.h, CUDA 13.0)
    _fields_ = [("timeoutMs", ctypes.c_uint), ("reserved0", ctypes.c_uint),
                ("reserved1", ctypes.c_uint64 * 7)]


class Reserved8(ctypes.Structure):  # CUcheckpointCheckpointArgs / CUcheckpointUnlockArgs
    _fields_ = [("reserved", ctypes.c_uint64 * 8)]


class RestoreArgs(ctypes.Structure):  # CUcheckpointRestoreArgs: 64 bytes, no GPU pairs here
    _fields_ = [("gpuPairs", ctypes.c_void_p), ("gpuPairsCount", ctypes.c_uint),
                ("reserved", ctypes.c_char * (52 - 8)), ("reserved1", ctypes.c_uint64)]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pids", required=True, help="comma-separated process ids")
    parser.add_argument("--lock-timeout-ms", type=int, default=60000)
    args = parser.parse_args()
    pids = [int(p) for p in args.pids.split(",") if p]
    assert ctypes.sizeof(LockArgs) == 64 and ctypes.sizeof(RestoreArgs) == 64

    try:
        cuda = ctypes.CDLL("libcuda.so.1")
        for name in ("cuCheckpointProcessLock", "cuCheckpointProcessCheckpoint",
                     "cuCheckpointProcessRestore", "cuCheckpointProcessUnlock",
                     "cuCheckpointProcessGetState"):
            getattr(cuda, name).argtypes = [ctypes.c_int, ctypes.c_void_p]
            getattr(cuda, name).restype = ctypes.c_int
        cuda.cuInit.argtypes = [ctypes.c_uint]
        rc = cuda.cuInit(0)
    except (OSError, AttributeError) as e:
        print(f"NATIVE cannot use libcuda.so.1: {e}", flush=True)
        return 2
    if rc != 0:
        print(f"NATIVE cuInit returned {rc}", flush=True)
        return 2

    def state_of(pid):
        state = ctypes.c_int(-1)
        rc = cuda.cuCheckpointProcessGetState(pid, ctypes.byref(state))
        return STATE_NAMES.get(state.value, str(state.value)) if rc == 0 else f"? (GetState rc {rc})"

    lock = LockArgs(timeoutMs=args.lock_timeout_ms)
    calls = [("lock", cuda.cuCheckpointProcessLock, lock),
             ("checkpoint", cuda.cuCheckpointProcessCheckpoint, Reserved8()),
             ("restore", cuda.cuCheckpointProcessRestore, RestoreArgs()),
             ("unlock", cuda.cuCheckpointProcessUnlock, Reserved8())]
    steps, states = {}, {}
    for step, function, step_args in calls:
        steps[step], states[step] = {}, {}
        for pid in pids:
            if step != "lock" and steps["lock"].get(str(pid)) != 0:
                continue  # never locked: leave it running
            rc = function(pid, ctypes.byref(step_args))
            steps[step][str(pid)] = rc
            states[step][str(pid)] = state_of(pid)
            print(f"NATIVE {step} pid={pid} rc={rc} {CU_RESULT_NAMES.get(rc, '?')} "
                  f"state={states[step][str(pid)]}", flush=True)
    print(json.dumps({"steps": steps, "states": states}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
