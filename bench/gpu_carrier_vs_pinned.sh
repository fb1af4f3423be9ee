#!/usr/bin/env bash
# The host carrier with every GPU copying at once, next to the pinned-copy baseline run on all
# GPUs at once in the same command (issue 6: goal >= 0.9x of the baseline).
#
#   bench/gpu_carrier_vs_pinned.sh <gpu build> [bytes per GPU, default 4G]
#
# <gpu build>: configured with -DCUSNAP_BUILD_GPU_TESTS=ON (see README, "GPU tests"). Runs two
# GPU tests of tests/gpu/run_all.sh in one command: pinned_baseline (cuMemcpy between
# cuMemAlloc memory and cuMemHostAlloc'd memory, each GPU alone, then all at once) and a
# share_checkpoint job whose two processes each create <bytes> on their own GPU and import the
# other's, checkpointed and restored twice. Prints, per cycle, the carrier's copy rate in the
# save phase (device to host) and the reallocate phase (host to device) as a ratio of the
# all-GPU baseline in the same direction, and the phase's whole rate (host registration
# included) beside it. Logs under $OUT (default ./gpu-out).
set -euo pipefail
if [[ $# -lt 1 ]]; then
  echo "usage: $0 <gpu build> [bytes per GPU, default 4G]" >&2
  exit 2
fi
BUILD=$1
BYTES=${2:-4G}
SRC=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
export OUT=${OUT:-./gpu-out}
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export GPU_BASELINE_BYTES=$BYTES GPU_SHARE_SIZES=$BYTES GPU_SHARE_B_BYTES=$BYTES
export GPU_SHARE_NAME=carrier-bench GPU_SHARE_CYCLES=2

"$SRC/tests/gpu/run_all.sh" "$BUILD" pinned_baseline share_checkpoint | sed -n "/==== results/,\$p"
LOG=$OUT/gpu-tests.log

# "BASELINE all 2 GPUs at once D2H: 110.1 GB/s aggregate ..." -> 110.1
baseline() { sed -nE "s/.*BASELINE all ([0-9]+) GPUs at once $1: ([0-9.]+) GB\/s.*/\2/p" "$LOG" | tail -1; }
D2H=$(baseline D2H)
H2D=$(baseline H2D)
GPUS=$(sed -nE 's/.*BASELINE all ([0-9]+) GPUs at once.*/\1/p' "$LOG" | tail -1)
[[ -n $D2H && -n $H2D ]] || { echo "no all-GPU baseline in $LOG" >&2; exit 1; }
echo "pinned baseline, all $GPUS GPUs at once, $BYTES per GPU: D2H $D2H GB/s, H2D $H2D GB/s"

# Phase lines: "save   377.9 ms  2 participants  5.31 GiB  15.1 GB/s (copies 57.9 GB/s)"
cycle=0
grep -E "^(save|reallocate) .*copies" "$LOG" | while read -r phase ms _ n _ size unit rate _ _ copies _; do
  [[ $phase == save ]] && cycle=$((cycle + 1))
  base=$D2H
  [[ $phase == reallocate ]] && base=$H2D
  ratio=$(awk -v c="$copies" -v b="$base" 'BEGIN { printf "%.2f", c / b }')
  printf 'BENCH cycle %d %-10s carrier copies %6s GB/s = %sx the all-GPU baseline (%s GB/s); phase %s ms, %s %s, %s GB/s with registration, %s participants\n' \
    "$cycle" "$phase" "$copies" "$ratio" "$base" "$ms" "$size" "$unit" "$rate" "$n"
done
