#!/usr/bin/env bash
# Phase times at 2, 4 and 8 processes sharing GPU memory (issue 6: "topology phases grow no
# faster than the number of allocations").
#
#   bench/gpu_phase_scale.sh <gpu build>
#
# <gpu build>: configured with -DCUSNAP_BUILD_GPU_TESTS=ON (see README, "GPU tests"). Runs the
# share_ring test of tests/gpu/run_all.sh: one job after another with N = 2, 4, 8 processes
# (GPU_RING_RANKS), rank r on GPU r % <GPU count>, each creating GPU_RING_ALLOCATIONS
# (default 8) allocations that every other rank imports and maps; each job checkpointed,
# restored and verified once. Prints the RING lines, then per phase its ms at the smallest and
# the largest N and their ratio next to the ratio of the allocation counts; a topology phase
# (inspect validate quiesce release import verify) meets the goal when its ratio is at most
# the allocations'. Every rank maps every allocation (N * N * K mappings in all, N * K per
# process): phases that work per mapping stay within the goal only while the processes run
# them in parallel (enough CPU cores). Other run_all.sh settings pass through (CUSNAP_GPU_SIM=1 with
# SIMCUDA_DEVICE_COUNT for the simulated driver). Logs under $OUT (default ./gpu-out).
# Exit status: that of the test run (the ratios are reported, not enforced).
set -uo pipefail
if [[ $# -ne 1 ]]; then
  echo "usage: $0 <gpu build>" >&2
  exit 2
fi
BUILD=$1
SRC=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
export OUT=${OUT:-./gpu-out}
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1

"$SRC/tests/gpu/run_all.sh" "$BUILD" share_ring | sed -n "/==== share_ring phase times/,\$p"
rc=${PIPESTATUS[0]}
RING_LOG=$OUT/tests/share_ring.log
lines=$(grep -ho "RING N=.*" "$RING_LOG" 2>/dev/null)
if [[ $(grep -c . <<<"$lines") -lt 2 ]]; then
  echo "fewer than two RING lines in $RING_LOG: no ratio to compute" >&2
  exit 1
fi

# "RING N=2 allocations=16 ... inspect=1.2 ..." lines -> one row per phase.
awk '
  {
    for (i = 2; i <= NF; ++i) { split($i, kv, "="); value[NR, kv[1]] = kv[2] }
  }
  END {
    lo = 1; hi = NR
    for (r = 1; r <= NR; ++r) {
      if (value[r, "N"] + 0 < value[lo, "N"] + 0) lo = r
      if (value[r, "N"] + 0 > value[hi, "N"] + 0) hi = r
    }
    alloc_ratio = value[hi, "allocations"] / value[lo, "allocations"]
    printf "SCALE N=%d -> N=%d: allocations %d -> %d (x%.2f); mappings %d -> %d (x%.2f), per process %d -> %d (x%.2f)\n",
      value[lo, "N"], value[hi, "N"], value[lo, "allocations"], value[hi, "allocations"], alloc_ratio,
      value[lo, "mappings"], value[hi, "mappings"], value[hi, "mappings"] / value[lo, "mappings"],
      value[lo, "mappings"] / value[lo, "N"], value[hi, "mappings"] / value[hi, "N"],
      (value[hi, "mappings"] / value[hi, "N"]) / (value[lo, "mappings"] / value[lo, "N"])
    n = split("inspect validate quiesce release import verify", topology, " ")
    for (t = 1; t <= n; ++t) is_topology[topology[t]] = 1
    n = split("inspect validate quiesce release import verify checkpoint restore save reallocate checkpoint_cmd restore_cmd", names, " ")
    met = 0
    for (i = 1; i <= n; ++i) {
      p = names[i]; a = value[lo, p]; b = value[hi, p]
      if (a + 0 > 0) {
        ratio = sprintf("x%.2f", b / a)
        verdict = (b / a <= alloc_ratio) ? "within" : "ABOVE"
      } else {
        ratio = "n/a"; verdict = "n/a (0 ms at the smallest N)"
      }
      if (is_topology[p]) {
        if (verdict == "within") ++met
        verdict = "topology phase, " verdict " the allocation ratio x" sprintf("%.2f", alloc_ratio)
      } else {
        verdict = "(for reference)"
      }
      printf "SCALE %-15s %9.1f ms -> %9.1f ms  %-7s %s\n", p, a, b, ratio, verdict
    }
    printf "SCALE SUMMARY: %d of 6 topology phases grew no faster than the allocations (x%.2f)\n", met, alloc_ratio
  }' <<<"$lines"
exit "$rc"
