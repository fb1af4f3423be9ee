#!/usr/bin/env bash
# The README's first steps, as a user on a clean clone types them: its job.py (the ```python
# block of "Checkpoint your own job") and its commands (the ```sh block after it that starts
# the job), run as written in a scratch folder with the built cusnap first on PATH, on the
# simulated driver. Every command must exit 0; then the job's log must show both processes,
# each reading back the word it wrote (its pid), no step printed while the job was
# checkpointed, and both stepping on after the restore.
set -euo pipefail
bin=$1 readme=$2
scratch=$(mktemp -d /tmp/cusnap-readme.XXXXXX)
out=""
fail() {
  echo "--- the commands' output:"; echo "$out"
  echo "--- job.log:"; cat "$scratch/job.log" 2>/dev/null || true
  echo "FAIL: $*"; exit 1
}
pids=()
cleanup() {
  local pid
  for pid in "${pids[@]}"; do kill -9 "$pid" 2>/dev/null || true; done
  rm -rf "$scratch"
}
trap cleanup EXIT

# The fenced blocks of the section, without the list's indentation.
section=$(awk '/^## Checkpoint your own job/ {on = 1; next} on && /^## / {exit} on' "$readme")
block() {  # block <language> <n>: the n-th (1-based) block of that language in the section
  awk -v lang="$1" -v n="$2" '
    /^ *```/ { if (inside) { inside = 0; next } if ($0 ~ "```" lang "$") { count++; inside = (count == n); next } }
    inside { sub(/^   /, ""); print }' <<<"$section"
}
block python 1 >"$scratch/job.py"
block sh 2 >"$scratch/steps.sh"
[[ -s $scratch/job.py ]] || fail "no python block in the README's first steps"
grep -q "cusnap run -- python3 job.py" "$scratch/steps.sh" || fail "the second sh block does not start job.py"
echo "--- the README's commands:"; cat "$scratch/steps.sh"

mkdir -m 0700 "$scratch/control"
mkdir "$scratch/sim"
out=$(cd "$scratch" && PATH="$bin:$PATH" CUSNAP_CONTROL_DIR="$scratch/control" \
      SIMCUDA_DIR="$scratch/sim" CUSNAP_DRIVER=sim bash -e steps.sh 2>&1) ||
  fail "a command of the README failed"
echo "$out"
log=$scratch/job.log
mapfile -t pids < <(awk '$3 == "step" {print $2}' "$log" | sort -u)
[[ ${#pids[@]} == 2 ]] || fail "job.log names ${#pids[@]} processes, not 2: $(cat "$log")"
awk '$3 == "step" && $7 != $2 {bad = 1} END {exit bad}' "$log" || fail "a GPU word is not its process's pid"
grep -q "checkpoint: done" <<<"$out" || fail "no 'checkpoint: done'"
grep -q "restore: done" <<<"$out" || fail "no 'restore: done'"
# The two `tail -2 job.log` taken 3 s apart while the job was checkpointed: the second shows
# no step the first did not (a line the shim logged may push a step out of a tail).
tails=$(sed -n '/^checkpoint: done/,/^driver: /p' <<<"$out" | grep -vE '^(checkpoint: done|driver: )')
first=$(head -2 <<<"$tails") second=$(tail -2 <<<"$tails")
held=$(grep -E '^(parent|child) [0-9]+ step ' <<<"$first" || true)
[[ -n $held ]] || fail "no step in the first tail while checkpointed"
while read -r line; do
  grep -qxF -- "$line" <<<"$first" || fail "the job stepped while checkpointed: $line"
done < <(grep -E '^(parent|child) [0-9]+ step ' <<<"$second" || true)
# After the restore both step on past where they were held.
for pid in "${pids[@]}"; do
  before=$(grep -E "^[a-z]+ $pid step" <<<"$tails" | awk '{print $4}' | sort -n | tail -1)
  [[ -n $before ]] || before=1  # its step 1 was printed before the checkpoint
  for ((wait = 0; wait < 300; wait++)); do  # the README's 2 s, or up to 30 s on a slow machine
    last=$(grep -E "^[a-z]+ $pid step" "$log" | awk '{print $4}' | tail -1)
    [[ $last -gt $before ]] && break
    sleep 0.1
  done
  [[ $last -gt $before ]] || fail "pid $pid did not step on after the restore ($before -> $last)"
done
echo "PASS: the README's job checkpointed and restored; each process read its own GPU word back"
