#!/usr/bin/env bash
# How long `cusnap` takes to answer what needs no driver, beside a usage error's time, in the
# same run: refusals of a --pid that does not exist (checkpoint, restore, recover, dump,
# status), `status` of an empty control directory, `checkpoint --all` with no endpoint and
# `restore --all` with no checkpoint (neither loads the driver: nothing to act on), `completion`,
# `--help`, a bad setting's refusal and `status --pid` of a live process without the shim,
# each against
# `cusnap checkpoint --bogus` (a usage error: parsing only). Prints each one's median of
# <runs> and its ratio to the usage error's; the goal is 1.5x at most. No test times this
# (timings on shared machines flake); run it by hand:
#
#   bench/cli_answer_time.sh build/release/bin/cusnap [runs]
#
# CUSNAP_DRIVER (default sim) picks the driver: real on a GPU machine, where cuInit costs.
set -euo pipefail
if [[ $# -lt 1 ]]; then
  echo "usage: $0 <cusnap> [runs]" >&2
  exit 2
fi
CUSNAP=$1 RUNS=${2:-30}
scratch=$(mktemp -d /tmp/cusnap-answer-time.XXXXXX)
trap 'rm -rf "$scratch"' EXIT
mkdir -m 0700 "$scratch/control"
export CUSNAP_CONTROL_DIR=$scratch/control SIMCUDA_DIR=$scratch/sim CUSNAP_DRIVER=${CUSNAP_DRIVER:-sim}
mkdir "$scratch/sim"
# A pid that does not exist: above every live one, below pid_max.
gone=$(( $(cat /proc/sys/kernel/pid_max) - 1 ))
while kill -0 "$gone" 2>/dev/null; do gone=$((gone - 1)); done

# The cases: a name and cusnap's arguments; the first is the usage error every other is
# compared with.
names=("usage error (checkpoint --bogus)" "checkpoint --pid <gone>" "restore --pid <gone>"
       "recover --pid <gone>" "dump --pid <gone>" "status --pid <gone>" "status (no endpoints)"
       "checkpoint --all (no endpoints)" "restore --all (no checkpoint)" "completion bash" "--help"
       "checkpoint, bad CUSNAP_LEASE_MS" "status --pid <live, no shim>")
args=("checkpoint --bogus" "checkpoint --pid $gone --state-dir $scratch/state"
      "restore --pid $gone --state-dir $scratch/state" "recover --pid $gone"
      "dump --pid $gone --images-dir $scratch/images" "status --pid $gone" "status"
      "checkpoint --all --state-dir $scratch/state" "restore --all --state-dir $scratch/state"
      "completion bash" "--help" "checkpoint --all --state-dir $scratch/state" "status --pid $$")
# The environment of each case (every case runs through env, so each pays its exec alike).
envs=("" "" "" "" "" "" "" "" "" "" "" "CUSNAP_LEASE_MS=abc" "")

# Round after round, each case once per round, so that a change in the machine's load
# while the bench runs weighs on every case alike; each case's times in $scratch/times-<i>.
for ((round = 0; round < RUNS; round++)); do
  for i in "${!args[@]}"; do
    t0=$(date +%s%N)
    # shellcheck disable=SC2086  # the environment and the arguments are words
    env ${envs[$i]} "$CUSNAP" ${args[$i]} >/dev/null 2>&1 || true
    t1=$(date +%s%N)
    echo $(( (t1 - t0) / 1000 )) >>"$scratch/times-$i"
  done
done

median_ms() {  # median_ms <case index>
  sort -n "$scratch/times-$1" | awk '{ a[NR] = $1 } END { printf "%.2f", a[int((NR + 1) / 2)] / 1000 }'
}
usage=$(median_ms 0)
printf '%-40s %8s ms\n' "${names[0]}" "$usage"
worst=0
for ((i = 1; i < ${#args[@]}; i++)); do
  ms=$(median_ms "$i")
  ratio=$(awk -v a="$ms" -v b="$usage" 'BEGIN { printf "%.2f", a / b }')
  printf '%-40s %8s ms  %sx\n' "${names[$i]}" "$ms" "$ratio"
  worst=$(awk -v a="$ratio" -v b="$worst" 'BEGIN { print (a > b) ? a : b }')
done
echo "worst ratio ${worst}x (goal: at most 1.5x; $RUNS rounds, medians)"
