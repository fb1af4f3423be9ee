#!/usr/bin/env bash
# A cusnap job in a Podman container, checkpointed and restored by Podman itself (runc, which
# runs CRIU with cusnap's plugin, libcusnap_criu.so), on a machine without Podman: the bundle
# of scripts/podman_bundle.sh (carried as <source>/.podman) brings Podman, runc and conmon.
#
#   tests/gpu/podman_gpu.sh <build dir> [--job torch|criu_job]
#
# The job: torch_ipc_job.py (default: a producer and the consumer it spawned sharing CUDA
# tensors, one GPU) or criu_job (two processes sharing an allocation, two GPUs: the simulated
# driver's, CUSNAP_DRIVER=sim by default for it) under `cusnap run`, the container's entry
# point. The container has no image: --rootfs of an empty skeleton with the host's /usr, /etc
# (and /lib, /lib64, /bin, /sbin where they are folders), the source and build, Python's and
# torch's folders outside /usr, read-only at their own paths, the job's folder read-write (go
# files, output, control directory) and the NVIDIA device nodes. CRIU's configuration
# (`libdir <build>/lib/criu`) is named by the container's org.criu.config annotation.
#
# Steps: the bundle's setup, the container started, the job ready (round 0 checked), then
# twice `podman container checkpoint` + `podman container restore` in place (no --export: a
# --rootfs container cannot be imported) each followed by a round of the job's own exact
# checks, then `podman container checkpoint --leave-running` (the job active again, `cusnap
# status --pid`), the last round, the container's exit status 0. Every step's command, exit
# status, time and the tail of CRIU's log (userdata/dump.log, restore.log, kept by --keep) go
# to $OUT/podman_gpu.log; the whole CRIU logs (gzip) and the job's output to $OUT/podman_gpu/. The
# last line is `PODMAN GPU: PASS` or `PODMAN GPU: FAIL at <step>: <why>`; exit status 77
# (`PODMAN GPU: SKIP: <why>`) when something the attempt needs is missing.
#
# Environment: OUT (default ./gpu-out); CUSNAP_CRIU (default <source>/.criu/bin/criu);
# CUSNAP_PODMAN_BUNDLE (default <source>/.podman); GPU_TORCH_IPC_MIB (default 64);
# PODMAN_GPU_RUN_OPTS, more `podman run` options (e.g. --cgroup-parent=...); PODMAN_GPU_BUDGET_S,
# the seconds every step together may take (default 330: each step's timeout is cut to what is
# left). When `podman run` fails, it is tried once more with --privileged.
set -uo pipefail

usage() { echo "usage: $0 <build dir> [--job torch|criu_job]" >&2; exit 2; }
[[ $# -ge 1 && -d $1 ]] || usage
BUILD=$(cd "$1" && pwd)
shift
JOB=torch
while (($#)); do
  case $1 in
    --job) JOB=${2:-}; shift 2 || usage ;;
    *) usage ;;
  esac
done
[[ $JOB == torch || $JOB == criu_job ]] || usage
SRC=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
OUT=${OUT:-./gpu-out}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
LOG=$OUT/podman_gpu.log
KEEP=$OUT/podman_gpu
rm -rf "$KEEP"
mkdir -p "$KEEP"
: >"$LOG"
BUNDLE=${CUSNAP_PODMAN_BUNDLE:-$SRC/.podman}
CRIU=${CUSNAP_CRIU:-$SRC/.criu/bin/criu}
BIN=$BUILD/bin
BUDGET_S=${PODMAN_GPU_BUDGET_S:-330}
ROUNDS=3   # round 0 at the start, one after each of the three checkpoints

# Never multicast on the project's machines; every child (the container too) gets these.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
if [[ $JOB == criu_job ]]; then export CUSNAP_DRIVER=${CUSNAP_DRIVER:-sim}; else export CUSNAP_DRIVER=${CUSNAP_DRIVER:-real}; fi
export CUSNAP_LOG=${CUSNAP_LOG:-warn} CUDA_DEVICE_ORDER=${CUDA_DEVICE_ORDER:-PCI_BUS_ID}

say() { echo "$*" | tee -a "$LOG"; }
log() { echo "$*" >>"$LOG"; }

W=""
PODMAN=""
NAME=cusnap-podman-gpu-$$
cleanup() {
  [[ -n $W ]] || return
  if [[ -n $PODMAN ]]; then
    timeout 60 "$PODMAN" rm -f -t 0 "$NAME" >"$KEEP/cleanup.log" 2>&1
  fi
  [[ -f $W/job/job.log ]] && cp "$W/job/job.log" "$KEEP/job.log"
  # Nothing is removed while a mount lies under the work folder (a container that would not go
  # away): the host's folders are bound into its root.
  if grep -q " $W/" /proc/self/mountinfo; then
    echo "podman_gpu: $W kept: mounts remain under it" >>"$KEEP/cleanup.log"
  else
    rm -rf --one-file-system "$W"
  fi
}
trap cleanup EXIT
trap 'say "PODMAN GPU: FAIL at a signal: stopped from outside (a timeout?)"; exit 143' TERM INT HUP

skip() { say "SKIP: $*"; say "PODMAN GPU: SKIP: $*"; exit 77; }
fail() {  # fail <step> <why>
  [[ -f $W/job/job.log ]] && { log "---- the job's output (last 60 lines)"; tail -n 60 "$W/job/job.log" >>"$LOG"; }
  say "PODMAN GPU: FAIL at $1: $2"
  exit 1
}

# left <limit s>: the limit, or what is left of the budget when less (a step then fails by its
# timeout inside the budget, its log kept).
left() {
  local rest=$((BUDGET_S - SECONDS))
  ((rest < 1)) && rest=1
  echo $(($1 < rest ? $1 : rest))
}

# run <step> <timeout s> <command...>: the command, its output and exit status (in RC) and
# its time, in the log.
RC=0
run() {
  local step=$1 limit
  limit=$(left "$2")
  shift 2
  log ""
  log "==== $step $(date -u +%H:%M:%S): \$ $*"
  local began=$SECONDS
  timeout -k 10 "$limit" "$@" >"$W/step.out" 2>&1
  RC=$?
  cat "$W/step.out" >>"$LOG"
  log "==== $step: exit status $RC after $((SECONDS - began)) s"
  echo "     $step: exit status $RC ($((SECONDS - began)) s)"
}

P() { "$PODMAN" "$@"; }

# criu_log <step> <dump|restore>: CRIU's log of the last checkpoint or restore (kept by --keep in
# the container's userdata folder): its tail in the log, the whole of it in $KEEP.
criu_log() {
  local userdata file
  userdata=$(P inspect -f '{{.StaticDir}}' "$NAME" 2>/dev/null)
  file=$userdata/$2.log
  if [[ ! -f $file ]]; then
    log "---- $1: no CRIU log at $file"
    return
  fi
  gzip -c "$file" >"$KEEP/$1.$2.log.gz"
  log "---- $1: the last 25 lines of CRIU's $file (whole: $KEEP/$1.$2.log.gz)"
  tail -n 25 "$file" >>"$LOG"
  grep -h "cusnap_criu: " "$file" | tail -n 15 | sed 's/^/  | /' >>"$LOG"
}

# ---- what the attempt needs ------------------------------------------------------------------

say "podman_gpu: job $JOB, driver $CUSNAP_DRIVER, build $BUILD, $(date -u +%Y-%m-%dT%H:%M:%SZ)"
log "machine: $(uname -srm); $(. /etc/os-release 2>/dev/null && echo "$PRETTY_NAME"); $(getconf GNU_LIBC_VERSION 2>/dev/null)"
log "cgroups: $(stat -fc %T /sys/fs/cgroup 2>/dev/null) at /sys/fs/cgroup; this process in $(tr '\n' ' ' </proc/self/cgroup)"
log "cgroup mounts (type, mount point, options): $(awk '{ for (i = 7; $i != "-"; i++); if ($(i + 1) ~ /^cgroup/) printf "%s %s %s; ", $(i + 1), $5, $6 }' /proc/self/mountinfo)"
[[ $(id -u) -eq 0 ]] || skip "needs root (runc checkpoints as root only)"
[[ -f $BUNDLE/setup.sh && -f $BUNDLE/bundle.tar.xz ]] || skip "no Podman bundle at $BUNDLE (scripts/podman_bundle.sh, carried as .podman)"
[[ -x $CRIU ]] || skip "no CRIU at $CRIU (CUSNAP_CRIU, or <source>/.criu carried)"
for f in bin/cusnap lib/libcusnap.so lib/criu/libcusnap_criu.so; do
  [[ -e $BUILD/$f ]] || skip "$BUILD/$f is missing (a build with CRIU's header: scripts/fetch_criu.sh)"
done
[[ $JOB == torch || -x $BIN/criu_job ]] || skip "$BIN/criu_job is missing"
# CRIU dumps and restores the container's tmpfs mounts (/dev) with GNU tar and gzip.
for tool in tar gzip; do command -v "$tool" >/dev/null || skip "no $tool (CRIU runs it for the container's /dev)"; done

W=$(mktemp -d /tmp/cusnap-pg.XXXXXX)
chmod 0755 "$W"
if [[ $JOB == torch ]]; then
  # Where python3 and torch are (the container needs those folders), and a GPU torch can use.
  where=$(timeout -k 10 120 python3 -c 'import os, sys, torch
assert torch.cuda.is_available(), f"torch {torch.__version__} sees no CUDA GPU"
print(os.path.realpath(sys.executable)); print(sys.prefix); print(sys.base_prefix)
print(os.path.dirname(os.path.dirname(torch.__file__))); print(torch.__version__)
print(sys.executable)' 2>"$W/torch.err") ||
    skip "python3 with torch and a GPU: $(tail -n 1 "$W/torch.err")"
fi
mkdir -p "$W/job/go" "$W/job/ctl" "$W/state"
chmod 0700 "$W/job/ctl"
export CUSNAP_CONTROL_DIR=$W/job/ctl

# The bundle's programs run from where it is unpacked: beside the source when /tmp does not
# let programs run (mounted noexec).
unpack=$W/bundle
printf '#!/bin/sh\nexit 0\n' >"$W/exec-probe"
chmod +x "$W/exec-probe"
if ! "$W/exec-probe" 2>/dev/null; then
  unpack=$SRC/.podman-unpacked
  log "(/tmp does not let programs run: the bundle is unpacked in $unpack)"
fi
run setup 180 "$BUNDLE/setup.sh" --unpack "$unpack" --state "$W/state" --criu "$CRIU"
((RC == 0)) || fail setup "the Podman bundle does not run here: $(tail -n 3 "$W/step.out" | tr '\n' ' ')"
PODMAN=$(sed -n 's/^PODMAN=//p' "$W/step.out")
run version 60 "$PODMAN" version
((RC == 0)) || fail version "the bundled podman does not answer"

# ---- the container's root: host folders at their own paths -----------------------------------

rootfs=$W/rootfs
mkdir -p "$rootfs"/{proc,sys,dev,run,root,tmp,usr}
chmod 1777 "$rootfs/tmp"
# Every folder goes in with a non-recursive bind, and each mount below it (a machine's bind-mounted
# driver libraries, /etc/hosts, ...) as a mount of its own: runc names each mount of the
# container's spec to CRIU as external, and CRIU refuses a mount that a recursive bind brought
# along ("mnt: ... doesn't have a proper root mount").
mounts=()
covered=()
# add_mount <path> [rw]: <path> at its own path, with every mount below it, unless a folder
# already mounted holds it.
add_mount() {
  local p c sub
  p=$(readlink -f "$1")
  for c in "${covered[@]}"; do
    [[ $p == "$c" || $p == "$c"/* ]] && return
  done
  covered+=("$p")
  mounts+=(-v "$p:$p:${2:-ro},bind")
  while IFS= read -r sub; do
    [[ -e $sub && $sub != *[:,]* ]] && mounts+=(-v "$sub:$sub:${2:-ro},bind")
  done < <(awk -v p="$p" '{ mp = $5; gsub(/\\040/, " ", mp); if (index(mp, p "/") == 1) print mp }' /proc/self/mountinfo | sort -u)
}
add_mount /usr
for d in bin sbin lib lib64 lib32 libx32; do
  if [[ -L /$d ]]; then
    ln -s "$(readlink "/$d")" "$rootfs/$d"
  elif [[ -d /$d ]]; then
    mkdir -p "$rootfs/$d"
    add_mount "/$d"
  fi
done
# /etc read-only when Podman's own /etc/hosts, /etc/hostname and /etc/resolv.conf can be bound
# over files that exist there; else a copy (Podman would have to create them in a read-only
# folder).
if [[ -f /etc/hosts && -f /etc/hostname && -f /etc/resolv.conf ]]; then
  mkdir -p "$rootfs/etc"
  add_mount /etc
else
  cp -a /etc "$rootfs/etc" 2>>"$LOG"
  touch "$rootfs/etc/hosts" "$rootfs/etc/hostname" "$rootfs/etc/resolv.conf"
  covered+=(/etc)
  log "(/etc copied into the container's root: the host lacks /etc/hosts, /etc/hostname or /etc/resolv.conf)"
fi
add_mount "$SRC"
add_mount "$BUILD"
add_mount "$W/job" rw

env_opts=(-e CUSNAP_CONTROL_DIR="$W/job/ctl" -e CUSNAP_DRIVER="$CUSNAP_DRIVER" -e CUSNAP_LOG="$CUSNAP_LOG"
          -e NCCL_NVLS_ENABLE=0 -e TORCH_SYMM_MEM_DISABLE_MULTICAST=1 -e NVSHMEM_DISABLE_NVLS=1
          -e CUDA_DEVICE_ORDER="$CUDA_DEVICE_ORDER" -e HOME=/root)
[[ -n ${CUDA_VISIBLE_DEVICES:-} ]] && env_opts+=(-e CUDA_VISIBLE_DEVICES="$CUDA_VISIBLE_DEVICES")
[[ -n ${LD_LIBRARY_PATH:-} ]] && env_opts+=(-e LD_LIBRARY_PATH="$LD_LIBRARY_PATH")
[[ -n ${PYTHONPATH:-} ]] && env_opts+=(-e PYTHONPATH="$PYTHONPATH")
if [[ $JOB == torch ]]; then
  mapfile -t py <<<"$where"
  log "python3 ${py[0]}, prefix ${py[1]}, base prefix ${py[2]}, torch ${py[4]} in ${py[3]}"
  add_mount "$(dirname "$(dirname "${py[0]}")")"
  add_mount "${py[1]}"
  add_mount "${py[2]}"
  add_mount "${py[3]}"
  env_opts+=(-e PYTHONDONTWRITEBYTECODE=1 -e PYTHONUNBUFFERED=1 -e OMP_NUM_THREADS=1
             -e PYTORCH_CUDA_ALLOC_CONF=expandable_segments:False)
  # The interpreter as it was started (a virtual environment's bin/python3 finds its
  # packages from its own path; the binary it links to does not).
  job=("${py[5]}" "$SRC/tests/gpu/torch_ipc_job.py" --control "$W/job/go" --cycles "$ROUNDS"
       --mib "${GPU_TORCH_IPC_MIB:-64}" --allocator default --wait-s 280)
  start_timeout=240
else
  job=("$BIN/criu_job" "$W/job/go" 4 "$ROUNDS")
  start_timeout=60
fi
devices=()
if [[ $CUSNAP_DRIVER == sim ]]; then
  export SIMCUDA_DIR=$W/job/sim
  env_opts+=(-e SIMCUDA_DIR="$SIMCUDA_DIR")
else  # after torch's probe above, which makes the driver create /dev/nvidia-uvm when it is missing
  for d in /dev/nvidiactl /dev/nvidia-uvm; do
    [[ -c $d ]] || skip "no $d on this machine (the NVIDIA driver's device nodes)"
  done
  for d in /dev/nvidia[0-9]* /dev/nvidiactl /dev/nvidia-uvm /dev/nvidia-uvm-tools /dev/nvidia-caps/*; do
    [[ -c $d ]] && devices+=(--device "$d")
  done
  log "devices: ${devices[*]}"
fi

# CRIU's configuration for this container (runc reads the file the annotation names, for the
# dump and the restore): cusnap's plugin, and the options `cusnap dump` and the plain-CRIU GPU
# tests give CRIU for a PyTorch job (unix sockets, file locks, unlinked files still open) that
# runc's defaults lack. No network lock: the container has no network (--network=none), and
# CRIU's default lock runs iptables-restore, which a machine may lack ("net: Locking network
# failed: iptables-restore returned -1").
printf '%s\n' "libdir $BUILD/lib/criu" ext-unix-sk file-locks link-remap "network-lock skip" >"$W/criu.conf"

# The container's limits no higher than this process's: runc cannot raise them where the
# machine withholds CAP_SYS_RESOURCE ("error setting rlimit type 7: operation not permitted"),
# and the processes between it and us may hold lower ones (nproc 32768 where this shell's is
# 96367; root is not held to nproc anyway).
nofile=$(ulimit -Hn)
nproc=$(ulimit -Hu)
[[ $nofile == unlimited || $nofile -gt 65536 ]] && nofile=65536
[[ $nproc == unlimited || $nproc -gt 4096 ]] && nproc=4096

# ---- the job's output ---------------------------------------------------------------------------

JOBLOG=$W/job/job.log
: >"$JOBLOG"

# ready <k>: the lines that say both processes idle after round k-1 (round 0: after the start).
ready_count() {
  local k=$1
  if [[ $JOB == torch ]]; then
    grep -cE "^TI role=(producer|consumer) pid=[0-9]+ READY $k\b" "$JOBLOG"
  elif ((k == 1)); then
    grep -cE "^READY (root|child)$" "$JOBLOG"
  else
    grep -cE "^PASS (root|child) [0-9]+ round $((k - 1))$" "$JOBLOG"
  fi
}
done_count() {
  if [[ $JOB == torch ]]; then grep -cE "^TI role=(producer|consumer) DONE PASS" "$JOBLOG"
  else grep -cE "^PASS (root|child) [0-9]+ round $ROUNDS$" "$JOBLOG"; fi
}
job_failed() {
  if [[ $JOB == torch ]]; then grep -m1 -E "^TI role=\w+ (ERROR .*|DONE FAIL.*|round=[0-9]+ CHECK \S+ FAIL.*)|^SKIP: " "$JOBLOG"
  else grep -m1 -E "^(FAIL|LOST) " "$JOBLOG"; fi
}

# await <step> <count function> <arg> <timeout s>: until the function counts 2 (both processes).
await() {
  local step=$1 fn=$2 arg=$3 limit began=$SECONDS bad state ended=0
  limit=$(left "$4")
  while (($($fn "$arg") < 2)); do
    bad=$(job_failed)
    [[ -n $bad ]] && fail "$step" "the job says: $bad"
    ((ended)) && fail "$step" "the container ended ($state: state, exit code) before both processes said so"
    ((SECONDS - began < limit)) || fail "$step" "not both processes said so within $limit s (PODMAN_GPU_BUDGET_S=$BUDGET_S)"
    state=$(P inspect -f '{{.State.Status}} {{.State.ExitCode}}' "$NAME" 2>/dev/null) ||
      fail "$step" "the container is gone"
    [[ $state == running* ]] || ended=1  # its last lines are read once more first
    sleep 0.5
  done
  bad=$(job_failed)
  [[ -n $bad ]] && fail "$step" "the job says: $bad"
  log "---- $step: both processes ready after $((SECONDS - began)) s"
}

# checks <step> <round>: the round's check lines, every one PASS (torch: the four tensors' reads by
# both sides among them).
checks() {
  local step=$1 k=$2 lines
  if [[ $JOB == torch ]]; then
    lines=$(grep -E "^TI role=\w+ round=$k CHECK " "$JOBLOG")
    log "---- $step: round $k's checks"
    log "$lines"
    grep -q " FAIL" <<<"$lines" && fail "$step" "$(grep -m1 " FAIL" <<<"$lines")"
    for must in producer_kept_ consumer_kept_ producer_reads_consumer_ consumer_reads_producer_; do
      for t in large medium small_a small_b; do
        grep -q "CHECK $must$t PASS" <<<"$lines" || fail "$step" "no passed CHECK $must$t in round $k"
      done
    done
    say "     $step: round $k: $(wc -l <<<"$lines") checks PASS"
  else
    lines=$(grep -E "^(CHECKED|PASS|FAIL|LOST) " "$JOBLOG" | tail -n 4)
    log "$lines"
    say "     $step: round $k: $(grep -c "^PASS .* round $k$" "$JOBLOG") processes PASS"
  fi
}

host_pid() { P inspect -f '{{.State.Pid}}' "$NAME" 2>/dev/null; }

# Both participants active (a --leave-running checkpoint: the plugin's watch restores the job in
# place once CRIU ended), asked with `cusnap status --pid <host pid>` (it joins the container's
# namespaces).
await_active() {
  local step=$1 began=$SECONDS said="" limit
  limit=$(left 120)
  while ((SECONDS - began < limit)); do
    # Every participant line ("pid <pid> <program> <state> ...") active, two at least.
    said=$("$BIN/cusnap" status --pid "$(host_pid)" 2>&1) &&
      awk '/^pid / { n++; if (/ active /) a++ } END { exit !(n >= 2 && a == n) }' <<<"$said" && {
        log "---- $step: cusnap status --pid $(host_pid) after $((SECONDS - began)) s:"; log "$said"; return; }
    sleep 0.5
  done
  log "$said"
  fail "$step" "the job is not active again within $limit s (cusnap status above)"
}

# ---- the attempt --------------------------------------------------------------------------------

run_opts=(-d --name "$NAME" --rootfs --annotation org.criu.config="$W/criu.conf" --network=none
          --security-opt label=disable --security-opt apparmor=unconfined
          --ulimit "nofile=$nofile:$nofile" --ulimit "nproc=$nproc:$nproc" "${devices[@]}" "${mounts[@]}"
          "${env_opts[@]}")
# shellcheck disable=SC2206 # PODMAN_GPU_RUN_OPTS is a list of options
run_opts+=(${PODMAN_GPU_RUN_OPTS:-})
entry=(/bin/sh -c 'exec "$0" run -- "$@" >>'"$JOBLOG"' 2>&1' "$BIN/cusnap" "${job[@]}")
run start 120 "$PODMAN" run "${run_opts[@]}" "$rootfs" "${entry[@]}"
if ((RC != 0)); then
  # Once more with --privileged (every device allowed, no seccomp filter): what a machine's
  # cgroup setup refuses to runc (a device filter, say) may then pass; the log says which ran.
  first=$(tail -n 3 "$W/step.out" | tr '\n' ' ')
  P rm -f -t 0 "$NAME" >>"$LOG" 2>&1
  run start-privileged 120 "$PODMAN" run --privileged "${run_opts[@]}" "$rootfs" "${entry[@]}"
  ((RC == 0)) || fail start "podman run exited with $RC: $first; with --privileged: $(tail -n 3 "$W/step.out" | tr '\n' ' ')"
  say "     started with --privileged; without it: $first"
fi
await ready ready_count 1 "$start_timeout"
log "---- the container's init is pid $(host_pid) here"
[[ $JOB == torch ]] && checks ready 0

# round <k>: the go file of round k, then its checks.
round() {
  local k=$1 step=$2
  touch "$W/job/go/go-$k"
  if ((k < ROUNDS)); then await "$step" ready_count $((k + 1)) 240; else await "$step" done_count - 240; fi
  checks "$step" "$k"
}

for k in 1 2; do
  run "checkpoint-$k" 240 "$PODMAN" container checkpoint --keep "$NAME"
  criu_log "checkpoint-$k" dump
  ((RC == 0)) || fail "checkpoint-$k" "podman container checkpoint exited with $RC: $(grep -m1 -E "Error|error" "$W/step.out")"
  status=$(P inspect -f '{{.State.Status}} checkpointed={{.State.Checkpointed}}' "$NAME" 2>&1)
  log "---- the container after the checkpoint: $status"
  [[ $status == exited* || $status == stopped* ]] ||
    fail "checkpoint-$k" "the container is '$status', not exited, after the checkpoint"
  run "restore-$k" 240 "$PODMAN" container restore --keep "$NAME"
  criu_log "restore-$k" restore
  ((RC == 0)) || fail "restore-$k" "podman container restore exited with $RC: $(grep -m1 -E "Error|error" "$W/step.out")"
  log "---- the container's init is pid $(host_pid) here"
  round "$k" "round-$k"
done

run checkpoint-leave-running 240 "$PODMAN" container checkpoint --leave-running --keep "$NAME"
criu_log checkpoint-leave-running dump
((RC == 0)) || fail checkpoint-leave-running "podman container checkpoint --leave-running exited with $RC: $(grep -m1 -E "Error|error" "$W/step.out")"
await_active checkpoint-leave-running
round "$ROUNDS" "round-$ROUNDS"

run exit 120 "$PODMAN" wait "$NAME"
((RC == 0)) || fail exit "podman wait exited with $RC"
status=$(tail -n 1 "$W/step.out")
[[ $status == 0 ]] || fail exit "the container's exit status is $status, not 0"
log ""
log "---- the job's output"
cat "$JOBLOG" >>"$LOG"
say "PODMAN GPU: PASS"
