#!/usr/bin/env bash
# Skeleton (issue: images at the speed of the medium): `cusnap dump` and `restore
# --images-dir` of a running job beside the medium's own sequential write and read of the
# same bytes, measured in the same run, ratios printed. The native path and the GPU workload
# are the lead's to add (tests/gpu); this part needs only a job and a directory.
#
#   bench/images_vs_medium.sh <cusnap> <job pid> <images dir> [cold]
#
# <images dir> on the medium to measure (/dev/shm/x or a disk). `cold` (root): the page cache
# is dropped before the restore and before the medium's read, as a cold start finds it.
# The bytes are those of the images directory's dump files, holes excluded (du's allocated
# size). Prints each time and its ratio to the medium's.
set -euo pipefail
if [[ $# -lt 3 ]]; then
  echo "usage: $0 <cusnap> <job pid> <images dir> [cold]" >&2
  exit 2
fi
CUSNAP=$1 PID=$2 DIR=$3 COLD=${4:-}
now() { date +%s.%N; }
drop() { if [[ $COLD == cold ]]; then sync; echo 3 > /proc/sys/vm/drop_caches; fi; }
secs() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.3f", b - a }'; }

t0=$(now); "$CUSNAP" dump --pid "$PID" --images-dir "$DIR" >/dev/null; sync; t1=$(now)
dump_s=$(secs "$t0" "$t1")
bytes=$(du -B1 -c "$DIR"/*.img "$DIR"/carrier-*.bin "$DIR"/cusnap-state.json 2>/dev/null | tail -1 | cut -f1)

# The medium: one sequential write of as many bytes (synced), and one read of them.
probe=$DIR/.medium-probe
t0=$(now); dd if=/dev/zero of="$probe" bs=64M count=$(( (bytes + (64 << 20) - 1) >> 26 )) \
  conv=fsync status=none; t1=$(now)
write_s=$(secs "$t0" "$t1")
drop
t0=$(now); dd if="$probe" of=/dev/null bs=64M status=none; t1=$(now)
read_s=$(secs "$t0" "$t1")
rm -f "$probe"

drop
t0=$(now); "$CUSNAP" restore --images-dir "$DIR" >/dev/null; t1=$(now)
restore_s=$(secs "$t0" "$t1")

ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", a / b }'; }
printf 'bytes %s\n' "$bytes"
printf 'dump     %8.3f s  medium write %8.3f s  ratio %s\n' "$dump_s" "$write_s" "$(ratio "$dump_s" "$write_s")"
printf 'restore  %8.3f s  medium read  %8.3f s  ratio %s\n' "$restore_s" "$read_s" "$(ratio "$restore_s" "$read_s")"
