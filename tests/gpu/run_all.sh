#!/usr/bin/env bash
# The one entry point of the real-GPU tests (a machine of two GPUs, nvidia-h200-x2). Runs
# every test in order, each under `timeout`, carries on after a
# failure, and ends with one result line per test and the summary line
#   GPU SUMMARY: <passed> passed, <failed> failed, <skipped> skipped
#
#   tests/gpu/run_all.sh <build dir> [test names...]
#
# <build dir>: a build configured with -DCUSNAP_BUILD_GPU_TESTS=ON (release preset advised:
# the shim is preloaded into python3, which a sanitized shim cannot enter).
# Test names (default: all, in this order): preflight pinned_baseline vmm_basic
#   ticket_pair_plain ticket_pair_shim nccl_allreduce share_checkpoint
#   share_checkpoint_host_numa share_checkpoint_swapped share_checkpoint_tree share_ring
#   cusnap_demo workload_nccl workload_symm_mem workload_private_memory workload_long_suspend
#   workload_killed_restore workload_images workload_images_pidns workload_images_symm workload_images_criu workload_nccl_native multicast_forward workload_multicast carry_bench
#   driver_facts_visible driver_facts_ipc legacy_ipc_shim torch_ipc torch_ipc_hangup
#   torch_ipc_images torch_ipc_images_expandable torch_ipc_images_criu
#   torch_ipc_images_criu_expandable shim_overhead nccl_memory
#   (driver_facts_visible needs one GPU only: run it alone on a one-GPU machine; torch_ipc*
#   and shim_overhead need one GPU and PyTorch, and skip (77) without them)
# Run only when named: podman_gpu (tests/gpu/podman_gpu.sh: the torch job in a Podman container
#   checkpointed and restored by Podman + runc + CRIU with cusnap's plugin; one GPU, PyTorch,
#   the Podman bundle carried as .podman and CRIU as .criu; the C++ criu_job on the simulated
#   driver under CUSNAP_GPU_SIM=1)
#
# Environment:
#   OUT                     where the logs go (default ./gpu-out): $OUT/gpu-tests.log is the
#                           full log, $OUT/tests/<name>.log each test's output
#   GPU_BUDGET_S            seconds for the whole run (default 540); a test gets what is left
#   CUSNAP_ALLOW_MULTICAST  multicast tests run only when 1 (never on this project's machines)
#   GPU_CARRY_BYTES         carry_bench's bytes per process (default 4G; two processes on one GPU)
#   GPU_TORCH_IPC_CYCLES    torch_ipc's checkpoint + restore cycles (default 2; GPU_TORCH_IPC_MIB,
#                           default 64, the large shared tensor)
#   GPU_OVERHEAD_ARGS       more arguments for bench/gpu_shim_overhead.py (shim_overhead), e.g.
#                           "--repeats 5 --steps 200"
#   GPU_RING_RANKS          share_ring's process counts, one job after another (default "2 4 8";
#                           GPU_RING_ALLOCATIONS per process, default 8, of GPU_RING_BYTES, 2M)
#   CUSNAP_GPU_SIM=1        run on the simulated driver (<build>/simcuda) instead: a check of
#                           this script and the programs on a machine without a GPU
# The console shows each test's start and result (and the tail of a failed test's output);
# everything else is in the log (a running test's output grows in $OUT/tests/<name>.log).
set -uo pipefail

if [[ $# -lt 1 || ! -d $1 ]]; then
  echo "usage: $0 <build dir> [test names...]" >&2
  exit 2
fi
BUILD=$(cd "$1" && pwd)
shift
SRC=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
OUT=${OUT:-./gpu-out}
mkdir -p "$OUT/tests"
OUT=$(cd "$OUT" && pwd)
LOG=$OUT/gpu-tests.log
: >"$LOG"

# Never multicast on these machines (DRIVER-FACTS F9, machine notes); every child inherits.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export CUDA_DEVICE_ORDER=PCI_BUS_ID
export CUSNAP_LOG=${CUSNAP_LOG:-warn}
export ASAN_OPTIONS=${ASAN_OPTIONS:-verify_asan_link_order=0:detect_leaks=0}
export PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
export CUSNAP_GPU_BUILD=$BUILD CUSNAP_GPU_OUT=$OUT CUSNAP_GPU_SRC=$SRC
# Control directories live under a short /tmp path: socket paths must stay under 108 bytes.
CUSNAP_GPU_CTL=$(mktemp -d /tmp/cusnap-gpu.XXXXXX)
export CUSNAP_GPU_CTL
export CUSNAP_CONTROL_DIR=$CUSNAP_GPU_CTL/default
mkdir -p "$CUSNAP_CONTROL_DIR" && chmod 0700 "$CUSNAP_CONTROL_DIR"
if [[ ${CUSNAP_GPU_SIM:-0} == 1 ]]; then
  export CUSNAP_GPU_SIM=1 CUSNAP_DRIVER=sim
  export LD_LIBRARY_PATH=$BUILD/simcuda${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
else
  export CUSNAP_GPU_SIM=0 CUSNAP_DRIVER=real
fi
BIN=$BUILD/bin
export BIN

BUDGET_S=${GPU_BUDGET_S:-540}
START_S=$SECONDS
ALL_TESTS=(preflight pinned_baseline vmm_basic ticket_pair_plain ticket_pair_shim nccl_allreduce
           share_checkpoint share_checkpoint_host_numa share_checkpoint_swapped share_checkpoint_tree share_ring
           cusnap_demo
           workload_nccl workload_symm_mem workload_private_memory workload_long_suspend
           workload_killed_restore workload_images workload_images_pidns workload_images_symm workload_images_criu workload_nccl_native multicast_forward workload_multicast carry_bench
           driver_facts_visible driver_facts_ipc legacy_ipc_shim torch_ipc torch_ipc_hangup
           torch_ipc_images torch_ipc_images_expandable torch_ipc_images_criu torch_ipc_images_criu_expandable
           shim_overhead nccl_memory)
NAMED_ONLY=(podman_gpu)   # not in the default run: only when named
SELECTED=("$@")
((${#SELECTED[@]})) || SELECTED=("${ALL_TESTS[@]}")
for name in "${SELECTED[@]}"; do
  [[ " ${ALL_TESTS[*]} ${NAMED_ONLY[*]} " == *" $name "* ]] ||
    { echo "unknown test '$name' (known: ${ALL_TESTS[*]} ${NAMED_ONLY[*]})" >&2; exit 2; }
done

# say: a line on the console and in the log.
say() { echo "$*" | tee -a "$LOG"; }

RESULTS=()
PASSED=0 FAILED=0 SKIPPED=0
record() {  # record <name> PASS|FAIL|SKIP <detail>
  local line
  line=$(printf 'GPU RESULT %-28s %s  %s' "$1" "$2" "$3")
  RESULTS+=("$line")
  say "$line"
  case $2 in
    PASS) PASSED=$((PASSED + 1)) ;;
    SKIP) SKIPPED=$((SKIPPED + 1)) ;;
    *) FAILED=$((FAILED + 1)) ;;
  esac
}

# run_test <name> <timeout s> <function>: runs the exported test function in a child bash under
# `timeout` (its process group is killed on expiry), output to the log and the test's log.
run_test() {
  local name=$1 limit=$2 body=$3
  local left=$((BUDGET_S - (SECONDS - START_S) - 5))
  if ((left < 20)); then
    record "$name" FAIL "not run: the time budget (GPU_BUDGET_S=$BUDGET_S) is used up"
    return
  fi
  ((limit > left)) && limit=$left
  local test_log=$OUT/tests/$name.log
  say "==== $name (timeout ${limit} s) $(date -u +%H:%M:%S)"
  local began=$SECONDS
  timeout -k 20 "$limit" bash -c "$body" >"$test_log" 2>&1
  local rc=$?
  cat "$test_log" >>"$LOG"
  local took=$((SECONDS - began))
  if ((rc == 0)); then
    record "$name" PASS "(${took} s)"
  elif ((rc == 77)); then
    record "$name" SKIP "$(grep -m1 -o 'SKIP: .*' "$test_log" || echo 'skipped') (${took} s)"
  else
    local why="exit status $rc"
    ((rc == 124 || rc == 137)) && why="timed out after ${limit} s"
    record "$name" FAIL "$why (${took} s)"
    echo "    last lines of $test_log:"
    tail -n 40 "$test_log" | sed 's/^/    | /'
  fi
}

selected() { [[ " ${SELECTED[*]} " == *" $1 "* ]]; }

# pytest when the machine has it, else the file's own __main__ (same test function).
pytest_or_python() {
  if python3 -c 'import pytest' 2>/dev/null; then
    echo "python3 -m pytest -s -v -p no:cacheprovider"
  else
    echo "python3"
  fi
}
PYTEST=$(pytest_or_python)

# ---------------------------------------------------------------------------------------
# Test bodies: exported functions, each run by `timeout ... bash -c <function>` in a process
# group of its own, with the variables above exported.

t_preflight() {
  echo "build: $CUSNAP_GPU_BUILD  driver: $CUSNAP_DRIVER  multicast allowed: ${CUSNAP_ALLOW_MULTICAST:-0}"
  env | grep -E "^(NCCL_NVLS_ENABLE|TORCH_SYMM_MEM_DISABLE_MULTICAST|NVSHMEM_DISABLE_NVLS|CUSNAP_|CUDA_|LD_LIBRARY_PATH)=" | sort
  if [[ $CUSNAP_GPU_SIM != 1 ]]; then
    if command -v nvidia-smi >/dev/null; then
      nvidia-smi
      nvidia-smi topo -m
    else
      echo "(no nvidia-smi: memory readings will come from cuMemGetInfo)"
    fi
    python3 -c "import torch; print(\"torch\", torch.__version__, \"cuda\", torch.version.cuda, \"nccl\", torch.cuda.nccl.version(), \"gpus\", torch.cuda.device_count())" || echo "(no torch)"
  fi
  missing=0
  for p in cusnap gpu_vmm_basic gpu_ticket_pair gpu_share_checkpoint gpu_pinned_baseline gpu_meminfo gpu_pair_launcher gpu_inspect gpu_multicast_forward; do
    [[ -x $BIN/$p ]] || { echo "missing $BIN/$p (configure with -DCUSNAP_BUILD_GPU_TESTS=ON)"; missing=1; }
  done
  [[ -f $CUSNAP_GPU_BUILD/lib/libcusnap.so ]] || { echo "missing $CUSNAP_GPU_BUILD/lib/libcusnap.so"; missing=1; }
  ((missing == 0)) || exit 1
  "$BIN/gpu_meminfo" || exit 1
  gpus=$("$BIN/gpu_meminfo" | grep -c "^gpu ")
  echo "GPUs seen by the driver: $gpus"
  ((gpus >= 2)) || { echo "these tests need two GPUs"; exit 1; }
  "$BIN/cusnap" --help | head -20
  preload=$("$BIN/cusnap" run -- /bin/sh -c "echo \$LD_PRELOAD")
  echo "cusnap run sets LD_PRELOAD=$preload"
  [[ $preload == *libcusnap.so* ]] || { echo "cusnap run did not preload libcusnap.so"; exit 1; }
}

# cuDeviceGetCount / cuDeviceGetUuid under CUDA_VISIBLE_DEVICES values a launcher
# may set, on one GPU; ROW lines for docs/DRIVER-FACTS.md go to $OUT/driver_facts_visible.rows.
t_driver_facts_visible() {
  [[ $CUSNAP_GPU_SIM == 1 ]] && echo "(simulated driver: the rows are simcuda's, not a GPU's)"
  env -u LD_PRELOAD "$BIN/gpu_driver_facts" visible-one | tee "$CUSNAP_GPU_OUT/driver_facts_visible.out"
  rc=${PIPESTATUS[0]}
  grep "^ROW " "$CUSNAP_GPU_OUT/driver_facts_visible.out" | sed 's/^ROW //' >"$CUSNAP_GPU_OUT/driver_facts_visible.rows"
  echo "--- $(wc -l <"$CUSNAP_GPU_OUT/driver_facts_visible.rows") rows in $CUSNAP_GPU_OUT/driver_facts_visible.rows"
  ((rc == 0)) && [[ -s $CUSNAP_GPU_OUT/driver_facts_visible.rows ]]
}

t_pinned_baseline() {
  "$BIN/gpu_pinned_baseline" --bytes "${GPU_BASELINE_BYTES:-4G}" --reps 3
}

t_vmm_basic() {
  dir=$CUSNAP_GPU_OUT/vmm_basic
  mkdir -p "$dir"
  echo "--- without the shim"
  env -u LD_PRELOAD "$BIN/gpu_vmm_basic" | tee "$dir/plain.out"
  plain=${PIPESTATUS[0]}
  echo "--- under cusnap run"
  "$BIN/cusnap" run -- "$BIN/gpu_vmm_basic" | tee "$dir/shim.out"
  shim=${PIPESTATUS[0]}
  grep "^RESULT" "$dir/plain.out" >"$dir/plain.results"
  grep "^RESULT" "$dir/shim.out" >"$dir/shim.results"
  echo "--- exit status without the shim $plain, with it $shim; RESULT lines compared:"
  if diff -u "$dir/plain.results" "$dir/shim.results"; then
    echo "identical: $(wc -l <"$dir/plain.results") RESULT lines"
  else
    echo "RESULT lines differ with the shim"; exit 1
  fi
  grep -q "^RESULT done" "$dir/plain.results" || { echo "the program did not finish"; exit 1; }
  ((plain == 0 && shim == 0))
}

t_ticket_pair_plain() {
  env -u LD_PRELOAD "$BIN/gpu_pair_launcher" --stdin-to none -- "$BIN/gpu_ticket_pair" --bytes "${GPU_TICKET_BYTES:-256M}" --expect plain
}

t_ticket_pair_shim() {
  export CUSNAP_CONTROL_DIR=$CUSNAP_GPU_CTL/ticket
  mkdir -p "$CUSNAP_CONTROL_DIR" && chmod 0700 "$CUSNAP_CONTROL_DIR"
  "$BIN/cusnap" run -- "$BIN/gpu_pair_launcher" --stdin-to none -- "$BIN/gpu_ticket_pair" --bytes "${GPU_TICKET_BYTES:-256M}" --expect shim
}

t_nccl_allreduce() {
  $PYTEST "$CUSNAP_GPU_SRC/tests/gpu/test_nccl_allreduce.py"
}

t_share_checkpoint() {
  $PYTEST "$CUSNAP_GPU_SRC/tests/gpu/test_share_checkpoint.py"
}

t_share_checkpoint_host_numa() {
  export GPU_SHARE_NAME=host-numa GPU_SHARE_SIZES=${GPU_HN_SIZES:-64M,256M} GPU_SHARE_B_BYTES=64M
  export GPU_SHARE_HOST_NUMA=${GPU_HN_BYTES:-64M} GPU_SHARE_CYCLES=1
  $PYTEST "$CUSNAP_GPU_SRC/tests/gpu/test_share_checkpoint.py"
}

# Restored onto swapped GPUs (--device-map 0=1,1=0, DRIVER-FACTS F7).
t_share_checkpoint_swapped() {
  export GPU_SHARE_NAME=swapped GPU_SHARE_SIZES=64M,1G GPU_SHARE_B_BYTES=256M GPU_SHARE_CYCLES=1
  export GPU_SHARE_DEVICE_MAP=0=1,1=0
  $PYTEST "$CUSNAP_GPU_SRC/tests/gpu/test_share_checkpoint.py"
}

# The whole tree under `cusnap run`: the non-CUDA launcher carries the shim (and an
# endpoint) too, as the parent of a real job (torchrun, a shell) would.
t_share_checkpoint_tree() {
  export GPU_SHARE_NAME=tree GPU_SHARE_LAUNCH=tree GPU_SHARE_SIZES=64M,128M,256M GPU_SHARE_B_BYTES=64M
  export GPU_SHARE_CYCLES=1
  $PYTEST "$CUSNAP_GPU_SRC/tests/gpu/test_share_checkpoint.py"
}

# Phase times at 2, 4 and 8 processes (rank r on GPU r % <GPU count>), every process
# sharing GPU_RING_ALLOCATIONS allocations with every other; one "RING N=..." line per count.
t_share_ring() {
  local n rc=0
  for n in ${GPU_RING_RANKS:-2 4 8}; do
    echo "---- share_ring with $n processes"
    GPU_RING_PROCESSES=$n $PYTEST "$CUSNAP_GPU_SRC/tests/gpu/test_share_ring.py" || rc=1
  done
  return $rc
}

t_cusnap_demo() {
  export CUSNAP_CONTROL_DIR=$CUSNAP_GPU_CTL/demo
  mkdir -p "$CUSNAP_CONTROL_DIR" && chmod 0700 "$CUSNAP_CONTROL_DIR"
  "$BIN/cusnap" demo
}

# The PyTorch workloads (workload_common.py, workload_rank.py): unmodified torchrun
# jobs under `cusnap run`, checkpointed and restored while their ranks idle.
t_workload_nccl() {
  $PYTEST "$CUSNAP_GPU_SRC/tests/gpu/test_workload_nccl.py"
}

t_workload_symm_mem() {
  $PYTEST "$CUSNAP_GPU_SRC/tests/gpu/test_workload_symm_mem.py"
}

t_workload_private_memory() {
  $PYTEST "$CUSNAP_GPU_SRC/tests/gpu/test_workload_private_memory.py"
}

# Long suspends (docs/LONG-SUSPEND.md): the NCCL job held checkpointed for longer
# than its heartbeat, collective and store timeouts (30 s each; held 75 s, stopped, then
# runnable), restored, exact, exit 0. One GPU is enough (one rank per GPU).
t_workload_long_suspend() {
  $PYTEST "$CUSNAP_GPU_SRC/tests/gpu/test_workload_long_suspend.py"
}

# The hold after a command (docs/LONG-SUSPEND.md): the NCCL job held stopped, a restore killed
# after it continued the ranks; each rank stops itself again within a lease, stays held 75 s
# (past its heartbeat monitor), and the next restore brings it back exact. One GPU is enough.
t_workload_killed_restore() {
  $PYTEST "$CUSNAP_GPU_SRC/tests/gpu/test_workload_killed_restore.py"
}

# The NCCL job dumped to disk with `cusnap dump` (CRIU), the processes gone, then
# `cusnap restore --images-dir` in new processes; again from /dev/shm (C -> R -> C -> R); the
# O_DIRECT rate of the same bytes on the same filesystem beside (IMAGES RATE lines). One GPU
# is enough. CRIU: CUSNAP_CRIU, else <source>/.criu (scripts/fetch_criu.sh, carried along).
t_workload_images() {
  $PYTEST "$CUSNAP_GPU_SRC/tests/gpu/test_workload_images.py"
}

# The same, with the launcher's pid taken by another process before the second
# restore: the job comes back in a PID namespace of its own, and a checkpoint + restore in
# place through its pid here keeps it exact (test_workload_images.py, GPU_IMAGES_TAKE_PID=1).
t_workload_images_pidns() {
  GPU_IMAGES_TAKE_PID=1 $PYTEST "$CUSNAP_GPU_SRC/tests/gpu/test_workload_images.py" \
    -k "not torchrun"
}

# The same C -> R -> C -> R with PyTorch symmetric memory in the ranks as well
# (workload_rank.py --parts nccl,symm; multicast off), checked exact after each restore.
t_workload_images_symm() {
  GPU_IMAGES_PARTS=nccl,symm $PYTEST "$CUSNAP_GPU_SRC/tests/gpu/test_workload_images.py" \
    -k "not torchrun"
}

# The same C -> R -> C -> R through plain `criu dump` / `criu restore` with cusnap's CRIU plugin
# (<build>/lib/criu), as a container engine runs CRIU (test_workload_images.py,
# GPU_IMAGES_VIA=criu).
t_workload_images_criu() {
  GPU_IMAGES_VIA=criu $PYTEST "$CUSNAP_GPU_SRC/tests/gpu/test_workload_images.py" -k "not torchrun"
}

# Native checkpoint only (no shim): leaves the ranks stuck (DRIVER-FACTS F8), so it runs last.
t_workload_nccl_native() {
  $PYTEST "$CUSNAP_GPU_SRC/tests/gpu/test_workload_nccl_native.py"
}

t_multicast_forward() {
  "$BIN/cusnap" run -- "$BIN/gpu_multicast_forward"
}

# Symmetric memory with multicast (multimem_all_reduce_): only ever run under
# What a native cycle does to legacy IPC memory (F11) and events (F15) on the bare
# driver, two processes on GPU 0, and what the driver answers about cuMemAlloc memory: FACT
# lines for docs/DRIVER-FACTS.md (not pass/fail beyond the probes running).
t_driver_facts_ipc() {
  env -u LD_PRELOAD "$BIN/gpu_driver_facts" ipc-mem && env -u LD_PRELOAD "$BIN/gpu_driver_facts" ipc-event
}

# cuMemAlloc memory shared by cuIpcGetMemHandle / cuIpcOpenMemHandle between two
# processes survives three cusnap checkpoint + restore cycles, every byte and pointer checked
# (GPU_LEGACY_IPC_GPUS=2 on a two-GPU machine: the opener on GPU 1, the third restore swapped).
t_legacy_ipc_shim() {
  export CUSNAP_CONTROL_DIR=$CUSNAP_GPU_CTL/legacy_ipc
  mkdir -p "$CUSNAP_CONTROL_DIR" && chmod 0700 "$CUSNAP_CONTROL_DIR"
  "$BIN/cusnap" run -- "$BIN/gpu_legacy_ipc" --cusnap "$BIN/cusnap" --bytes "${GPU_LEGACY_IPC_BYTES:-256M}" \
    --gpus "${GPU_LEGACY_IPC_GPUS:-1}"
}

# PyTorch: a producer under `cusnap run` passes CUDA tensors (default caching
# allocator: legacy IPC of cudaMalloc segments) to a consumer it spawned through a
# torch.multiprocessing Queue; two checkpoint + restore cycles of the tree, both sides read the
# kept values and each other's writes exactly, every process exits 0. One GPU is enough.
# pytest's own skip would count as a pass here: the body says SKIP (77) first when python3 has
# no torch or torch no GPU.
t_torch_ipc() {
  torch_gpu_or_skip || exit 77
  export CUSNAP_CONTROL_DIR=$CUSNAP_GPU_CTL/torch_ipc
  mkdir -p "$CUSNAP_CONTROL_DIR" && chmod 0700 "$CUSNAP_CONTROL_DIR"
  $PYTEST "$CUSNAP_GPU_SRC/tests/gpu/test_torch_ipc.py"
}

# A held job survives its shell: the same job started in the background by a bash
# with job control (`cusnap run ... &`), and the shell killed while the job is held (its
# orphaned process group gets SIGHUP + SIGCONT from the kernel): both processes stay stopped,
# the restore brings back every value (test_torch_ipc.py, GPU_TORCH_IPC_SHELL=1).
t_torch_ipc_hangup() {
  torch_gpu_or_skip || exit 77
  export CUSNAP_CONTROL_DIR=$CUSNAP_GPU_CTL/torch_ipc_hangup GPU_TORCH_IPC_SHELL=1
  mkdir -p "$CUSNAP_CONTROL_DIR" && chmod 0700 "$CUSNAP_CONTROL_DIR"
  $PYTEST "$CUSNAP_GPU_SRC/tests/gpu/test_torch_ipc.py"
}

# A trainer and an inference process sharing CUDA tensors through torch.multiprocessing
# (torch_ipc_job.py): two checkpoint + restore cycles in place, then three dump / restore
# --images-dir round trips in a row, the first restore with the trainer's pid taken (a PID
# namespace of its own), every tensor exact and the inference process reading the trainer's
# update after each restore (test_torch_ipc_images.py). The default caching allocator (legacy
# CUDA IPC), expandable segments, and the round trips through plain criu dump / criu restore
# with cusnap's CRIU plugin.
t_torch_ipc_images() {
  torch_gpu_or_skip || exit 77
  export CUSNAP_CONTROL_DIR=$CUSNAP_GPU_CTL/torch_ipc_images
  mkdir -p "$CUSNAP_CONTROL_DIR" && chmod 0700 "$CUSNAP_CONTROL_DIR"
  GPU_TORCH_IMAGES_ALLOC=${GPU_TORCH_IMAGES_ALLOC:-default} $PYTEST "$CUSNAP_GPU_SRC/tests/gpu/test_torch_ipc_images.py"
}

t_torch_ipc_images_expandable() {
  GPU_TORCH_IMAGES_ALLOC=expandable t_torch_ipc_images
}

t_torch_ipc_images_criu() {
  GPU_IMAGES_VIA=criu t_torch_ipc_images
}

t_torch_ipc_images_criu_expandable() {
  GPU_IMAGES_VIA=criu GPU_TORCH_IMAGES_ALLOC=expandable t_torch_ipc_images
}

# The shim's running cost on a PyTorch job (docs/MEASURED.md M14): training step time
# and cudaMalloc / cudaFree latency, plain and under `cusnap run`, in one command; every child
# under a timeout; one "SHIM OVERHEAD:" line. Exit 77 (SKIP) without torch or a GPU.
t_shim_overhead() {
  # shellcheck disable=SC2086 # GPU_OVERHEAD_ARGS is a list of arguments
  python3 "$CUSNAP_GPU_SRC/bench/gpu_shim_overhead.py" --build "$CUSNAP_GPU_BUILD" ${GPU_OVERHEAD_ARGS:-}
}

# GPU memory of the NCCL workload (nccl + private parts, one rank per GPU, at most
# two) plainly and under `cusnap run`, where every cuMemAlloc is a VMM allocation of the
# shim's; one "NCCL MEMORY:" line. Exit 77 (SKIP) without torch or nvidia-smi.
t_nccl_memory() {
  python3 "$CUSNAP_GPU_SRC/bench/gpu_nccl_memory.py" --build "$CUSNAP_GPU_BUILD"
}

# The torch job in a Podman container: checkpoint + restore in place twice, then a
# --leave-running checkpoint, through Podman, runc, CRIU and cusnap's plugin, with Podman,
# runc and conmon from the bundle (scripts/podman_bundle.sh, carried as .podman); every step
# and CRIU's log tails in $OUT/podman_gpu.log. On the simulated driver: criu_job instead.
t_podman_gpu() {
  local job=()
  [[ $CUSNAP_GPU_SIM == 1 ]] && job=(--job criu_job)
  OUT=$CUSNAP_GPU_OUT "$CUSNAP_GPU_SRC/tests/gpu/podman_gpu.sh" "$CUSNAP_GPU_BUILD" "${job[@]}"
}

# torch_gpu_or_skip: fails with a "SKIP: ..." line when python3 cannot import torch or torch
# sees no GPU (bounded: never waits more than two minutes).
torch_gpu_or_skip() {
  local why
  why=$(env -u LD_PRELOAD timeout -k 10 120 python3 -c '
import sys
try:
    import torch
except ImportError as e:
    sys.exit(f"torch cannot be imported ({e})")
if not torch.cuda.is_available():
    sys.exit(f"torch {torch.__version__} sees no CUDA GPU")
' 2>&1) && return 0
  echo "SKIP: ${why:-the torch probe timed out}" | tail -n 1
  return 1
}

# CUSNAP_ALLOW_MULTICAST=1 (the caller checks); the test file lifts the no-multicast setting.
t_workload_multicast() {
  $PYTEST "$CUSNAP_GPU_SRC/tests/gpu/test_workload_multicast.py"
}
# Suspend + resume of two processes on one GPU, native checkpoint of private memory
# vs cusnap on the same bytes POSIX-capable and private (bench/gpu_suspend_vs_native.py: cold
# and warm cycles, ratios); then the shared job with half of its memory zero (the zero scan),
# with each other pinning mode, with the carrier freed after restore, and eager (docs/MEASURED.md
# M10-M13). Every run says its settings in its BENCH settings line.
t_carry_bench() {
  local bench="python3 $CUSNAP_GPU_SRC/bench/gpu_suspend_vs_native.py --build $CUSNAP_GPU_BUILD"
  local bytes=${GPU_CARRY_BYTES:-4G}
  $bench --bytes "$bytes" --cycles 3 || return 1
  $bench --bytes "$bytes" --cycles 2 --zero-fraction 0.5 --modes shared || return 1
  CUSNAP_CARRIER_PIN=pipelined $bench --bytes "$bytes" --cycles 2 --modes shared || return 1
  CUSNAP_CARRIER_PIN=transfer $bench --bytes "$bytes" --cycles 2 --modes shared || return 1
  CUSNAP_CARRIER_KEEP=none $bench --bytes "$bytes" --cycles 2 --modes shared || return 1
  CUSNAP_CARRIER=eager $bench --bytes "$bytes" --cycles 1 --modes shared
}
export PYTEST
export -f torch_gpu_or_skip t_torch_ipc t_torch_ipc_hangup t_shim_overhead t_nccl_memory t_podman_gpu
export -f t_torch_ipc_images t_torch_ipc_images_expandable t_torch_ipc_images_criu t_torch_ipc_images_criu_expandable
export -f t_carry_bench t_preflight t_pinned_baseline t_vmm_basic t_ticket_pair_plain t_ticket_pair_shim \
  t_nccl_allreduce t_share_checkpoint t_share_checkpoint_host_numa t_share_checkpoint_swapped \
  t_share_checkpoint_tree t_share_ring \
  t_cusnap_demo t_workload_nccl t_workload_symm_mem t_workload_private_memory t_workload_long_suspend \
  t_workload_killed_restore t_workload_images t_workload_images_pidns t_workload_images_symm t_workload_images_criu t_workload_nccl_native \
  t_multicast_forward t_workload_multicast t_driver_facts_visible t_driver_facts_ipc t_legacy_ipc_shim

say "GPU tests: build $BUILD, source $SRC, log $LOG, driver $CUSNAP_DRIVER, budget ${BUDGET_S} s"
selected preflight && run_test preflight 120 t_preflight
selected pinned_baseline && run_test pinned_baseline 240 t_pinned_baseline
selected vmm_basic && run_test vmm_basic 180 t_vmm_basic
selected ticket_pair_plain && run_test ticket_pair_plain 180 t_ticket_pair_plain
selected ticket_pair_shim && run_test ticket_pair_shim 180 t_ticket_pair_shim
if selected nccl_allreduce; then
  if [[ $CUSNAP_GPU_SIM == 1 ]]; then
    record nccl_allreduce SKIP "PyTorch + NCCL need real GPUs (CUSNAP_GPU_SIM=1)"
  else
    run_test nccl_allreduce 420 t_nccl_allreduce
  fi
fi
selected share_checkpoint && run_test share_checkpoint 420 t_share_checkpoint
selected share_checkpoint_host_numa && run_test share_checkpoint_host_numa 240 t_share_checkpoint_host_numa
selected share_checkpoint_swapped && run_test share_checkpoint_swapped 240 t_share_checkpoint_swapped
selected share_checkpoint_tree && run_test share_checkpoint_tree 240 t_share_checkpoint_tree
selected share_ring && run_test share_ring 240 t_share_ring
selected cusnap_demo && run_test cusnap_demo 300 t_cusnap_demo
for name in workload_nccl workload_symm_mem workload_private_memory workload_long_suspend workload_killed_restore workload_images workload_images_pidns workload_images_symm workload_images_criu workload_nccl_native; do
  selected "$name" || continue
  if [[ $CUSNAP_GPU_SIM == 1 ]]; then
    record "$name" SKIP "PyTorch workloads need real GPUs (CUSNAP_GPU_SIM=1)"
    continue
  fi
  case $name in
    workload_nccl | workload_symm_mem) limit=240 ;;
    workload_private_memory) limit=180 ;;
    workload_long_suspend) limit=420 ;;
    workload_killed_restore) limit=300 ;;
    workload_images | workload_images_pidns | workload_images_symm | workload_images_criu) limit=420 ;;
    *) limit=150 ;;
  esac
  run_test "$name" "$limit" "t_$name"
done
if selected multicast_forward; then
  if [[ ${CUSNAP_ALLOW_MULTICAST:-0} == 1 ]]; then
    run_test multicast_forward 120 t_multicast_forward
  else
    record multicast_forward SKIP "cuMulticastCreate is never called unless CUSNAP_ALLOW_MULTICAST=1 (DRIVER-FACTS F9)"
  fi
fi
if selected workload_multicast; then
  if [[ ${CUSNAP_ALLOW_MULTICAST:-0} != 1 ]]; then
    record workload_multicast SKIP "cuMulticastCreate is never called unless CUSNAP_ALLOW_MULTICAST=1 (DRIVER-FACTS F9)"
  elif [[ $CUSNAP_GPU_SIM == 1 ]]; then
    record workload_multicast SKIP "PyTorch workloads need real GPUs (CUSNAP_GPU_SIM=1)"
  else
    run_test workload_multicast 240 t_workload_multicast
  fi
fi
selected carry_bench && run_test carry_bench 300 t_carry_bench
selected driver_facts_visible && run_test driver_facts_visible 60 t_driver_facts_visible

selected driver_facts_ipc && run_test driver_facts_ipc 180 t_driver_facts_ipc
selected legacy_ipc_shim && run_test legacy_ipc_shim 300 t_legacy_ipc_shim
selected podman_gpu && run_test podman_gpu 300 t_podman_gpu
for name in torch_ipc torch_ipc_hangup torch_ipc_images torch_ipc_images_expandable torch_ipc_images_criu \
  torch_ipc_images_criu_expandable \
  shim_overhead nccl_memory; do
  selected "$name" || continue
  if [[ $CUSNAP_GPU_SIM == 1 ]]; then
    record "$name" SKIP "PyTorch needs real GPUs (CUSNAP_GPU_SIM=1)"
    continue
  fi
  case $name in
    torch_ipc) run_test torch_ipc 300 t_torch_ipc ;;
    torch_ipc_hangup) run_test torch_ipc_hangup 300 t_torch_ipc_hangup ;;
    torch_ipc_images) run_test torch_ipc_images 420 t_torch_ipc_images ;;
    torch_ipc_images_expandable) run_test torch_ipc_images_expandable 420 t_torch_ipc_images_expandable ;;
    torch_ipc_images_criu) run_test torch_ipc_images_criu 420 t_torch_ipc_images_criu ;;
    torch_ipc_images_criu_expandable) run_test torch_ipc_images_criu_expandable 420 t_torch_ipc_images_criu_expandable ;;
    shim_overhead) run_test shim_overhead 420 t_shim_overhead ;;
    nccl_memory) run_test nccl_memory 600 t_nccl_memory ;;
  esac
done

rm -rf "$CUSNAP_GPU_CTL"
# The workloads' checkpoint and restore phase lines, gathered for the report.
shopt -s nullglob
workload_logs=("$OUT"/tests/workload_*.log "$OUT"/tests/torch_ipc*.log)
shopt -u nullglob
phase_lines=""
((${#workload_logs[@]})) && phase_lines=$(grep -ho "WORKLOAD .*" "${workload_logs[@]}")
if [[ -n $phase_lines ]]; then
  say ""
  say "==== workload phase lines (cusnap checkpoint / restore per cycle; native-only result)"
  while IFS= read -r line; do say "$line"; done <<<"$phase_lines"
fi
if selected share_ring && [[ -f $OUT/tests/share_ring.log ]]; then
  say ""
  say "==== share_ring phase times (ms) by number of processes"
  grep -ho "RING N=.*" "$OUT/tests/share_ring.log" | while IFS= read -r line; do say "$line"; done
fi
if selected nccl_memory && [[ -f $OUT/tests/nccl_memory.log ]]; then
  grep -h "^NCCL MEMORY:" "$OUT/tests/nccl_memory.log" | while IFS= read -r line; do say "$line"; done
fi
overhead_lines=""
[[ -f $OUT/tests/shim_overhead.log ]] && overhead_lines=$(grep -h "^SHIM \(RATIO\|OVERHEAD\)" "$OUT/tests/shim_overhead.log")
if selected shim_overhead && [[ -n $overhead_lines ]]; then
  say ""
  say "==== the shim's running cost on PyTorch (bench/gpu_shim_overhead.py)"
  while IFS= read -r line; do say "$line"; done <<<"$overhead_lines"
fi
say ""
say "==== results ($((SECONDS - START_S)) s; full log $LOG)"
for line in "${RESULTS[@]}"; do say "$line"; done
say "GPU SUMMARY: $PASSED passed, $FAILED failed, $SKIPPED skipped"
((FAILED == 0))
