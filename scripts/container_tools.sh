#!/usr/bin/env bash
# Installs and sets up what the container tests need (docs/CONTAINERS.md), and fails loudly
# when this machine cannot run them:
#   - Podman, runc, containerd (ctr) and busybox from the machine's own apt sources;
#   - the CRIU of scripts/fetch_criu.sh as `criu` on PATH (/usr/local/sbin/criu): runc runs
#     the `criu` it finds on PATH (its --criu option), and Podman refuses to checkpoint without
#     a `criu` of 3.11 or newer there;
#   - an image localhost/cusnap-base (busybox alone, made with `podman import`: no registry is
#     needed) in Podman's store and in containerd's;
#   - a containerd of its own (socket /run/cusnap-containerd/containerd.sock), started when
#     none answers there;
#   - a container started and removed with each engine. --check also checkpoints and restores
#     one with each (Podman: in place and through --export / --import; ctr: through a
#     checkpoint image), a few seconds each.
# Prints the exports the tests read (CUSNAP_PODMAN, CUSNAP_CTR). Safe to run again: it only
# adds what is missing. Needs root (runc checkpoints as root only).
#
# The options this machine needs (Debian 12, kernel 6.18, cgroup v1, no systemd): Podman with
# --cgroup-manager=cgroupfs --storage-driver=vfs --runtime=runc (Debian's crun is built without
# CRIU), and `run --ulimit nofile=1024:1024 --ulimit nproc=4096:4096` (runc cannot raise the
# container's limits here: "error setting rlimit type 7: operation not permitted");
# containerd's native snapshotter.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
criu_dir="${CUSNAP_CRIU_DIR:-$root/.criu}"
podman=(podman --cgroup-manager=cgroupfs --storage-driver=vfs --runtime=runc)
run_opts=(--ulimit nofile=1024:1024 --ulimit nproc=4096:4096 --network=none)
ctr_dir=/run/cusnap-containerd
ctr=(ctr --address "$ctr_dir/containerd.sock")
image=localhost/cusnap-base:latest
check=0
[[ ${1:-} == --check ]] && check=1

fail() { echo "container_tools: $*" >&2; exit 1; }

[[ $(id -u) -eq 0 ]] || fail "needs root (runc checkpoints only as root)"

packages=(podman runc containerd conmon busybox-static)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "container_tools: installing ${missing[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" ||
    fail "apt-get could not install ${missing[*]}"
fi

[[ -x $criu_dir/bin/criu ]] || fail "no CRIU in $criu_dir/bin: run scripts/fetch_criu.sh first"
if [[ $(readlink -f /usr/local/sbin/criu 2>/dev/null) != $(readlink -f "$criu_dir/bin/criu") ]]; then
  was=$(readlink -f /usr/local/sbin/criu 2>/dev/null || true)
  ln -sfn "$criu_dir/bin/criu" /usr/local/sbin/criu
  echo "container_tools: /usr/local/sbin/criu now points at $criu_dir/bin/criu${was:+ (it pointed at $was)}" >&2
fi
[[ $(readlink -f "$(command -v criu)") == $(readlink -f "$criu_dir/bin/criu") ]] ||
  fail "\`criu\` on PATH is $(command -v criu), not $criu_dir/bin/criu (put /usr/local/sbin first on PATH)"

if ! "${podman[@]}" image exists "$image"; then
  rootfs=$(mktemp -d /tmp/cusnap-rootfs.XXXXXX)
  mkdir -p "$rootfs/tree/bin" "$rootfs/tree/tmp" "$rootfs/tree/proc" "$rootfs/tree/sys" "$rootfs/tree/dev"
  install -m 0755 /bin/busybox "$rootfs/tree/bin/busybox"
  for applet in sh sleep cat echo ls ps kill true; do ln -s busybox "$rootfs/tree/bin/$applet"; done
  tar -C "$rootfs/tree" -cf "$rootfs/rootfs.tar" .
  "${podman[@]}" import --quiet "$rootfs/rootfs.tar" "$image" >/dev/null || { rm -rf "$rootfs"; fail "podman import failed"; }
  rm -rf "$rootfs"
fi

if ! "${ctr[@]}" version >/dev/null 2>&1; then
  mkdir -p "$ctr_dir" /var/lib/cusnap-containerd
  setsid containerd --root /var/lib/cusnap-containerd --state "$ctr_dir/state" \
    --address "$ctr_dir/containerd.sock" </dev/null >"$ctr_dir/containerd.log" 2>&1 &
  for _ in $(seq 100); do "${ctr[@]}" version >/dev/null 2>&1 && break; sleep 0.1; done
  "${ctr[@]}" version >/dev/null 2>&1 ||
    { tail -5 "$ctr_dir/containerd.log" >&2; fail "containerd did not start ($ctr_dir/containerd.log)"; }
fi
if ! "${ctr[@]}" images check "name==$image" 2>/dev/null | grep -q complete; then
  archive=$(mktemp /tmp/cusnap-base.XXXXXX.tar)
  rm -f "$archive"
  "${podman[@]}" save --quiet --format oci-archive -o "$archive" "$image" >/dev/null
  "${ctr[@]}" images import --snapshotter native "$archive" >/dev/null ||
    { rm -f "$archive"; fail "ctr images import failed"; }
  rm -f "$archive"
fi

# A container with each engine, started and removed.
name="cusnap-tools-$$"
"${podman[@]}" run --rm "${run_opts[@]}" "$image" true || fail "podman cannot run a container here"
"${ctr[@]}" run --rm --snapshotter native "$image" "$name" true || fail "ctr cannot run a container here"

if ((check)); then
  job='i=0; while true; do i=$((i+1)); echo $i > /tmp/count; sleep 0.1; done'
  archive="/tmp/$name.tar.zst"
  trap '"${podman[@]}" rm -f -t 0 "$name" >/dev/null 2>&1; "${ctr[@]}" task kill -s KILL "$name" >/dev/null 2>&1;
        sleep 0.5; "${ctr[@]}" task rm "$name" >/dev/null 2>&1; "${ctr[@]}" container rm "$name" >/dev/null 2>&1;
        "${ctr[@]}" images rm "localhost/$name:checkpoint" >/dev/null 2>&1; rm -f "$archive"' EXIT
  "${podman[@]}" run -d --name "$name" "${run_opts[@]}" "$image" sh -c "$job" >/dev/null
  "${podman[@]}" container checkpoint "$name" >/dev/null || fail "podman container checkpoint failed"
  "${podman[@]}" container restore "$name" >/dev/null || fail "podman container restore failed"
  "${podman[@]}" container checkpoint --export "$archive" "$name" >/dev/null ||
    fail "podman container checkpoint --export failed"
  "${podman[@]}" rm "$name" >/dev/null
  "${podman[@]}" container restore --import "$archive" >/dev/null || fail "podman container restore --import failed"
  "${podman[@]}" exec "$name" cat /tmp/count >/dev/null || fail "the restored Podman container does not run"
  "${podman[@]}" rm -f -t 0 "$name" >/dev/null
  echo "container_tools: podman checkpoint and restore (in place, --export / --import) work"

  "${ctr[@]}" run -d --snapshotter native "$image" "$name" sh -c "$job" >/dev/null
  "${ctr[@]}" container checkpoint --task --rw "$name" "localhost/$name:checkpoint" || fail "ctr container checkpoint failed"
  "${ctr[@]}" task kill -s KILL "$name"
  for _ in $(seq 100); do "${ctr[@]}" task rm "$name" >/dev/null 2>&1 && break; sleep 0.1; done
  "${ctr[@]}" container rm "$name"
  "${ctr[@]}" container restore --live --rw "$name" "localhost/$name:checkpoint" || fail "ctr container restore failed"
  "${ctr[@]}" task exec --exec-id check "$name" cat /tmp/count >/dev/null || fail "the restored ctr task does not run"
  echo "container_tools: ctr checkpoint and restore (through a checkpoint image) work"
fi

echo "container_tools: $(podman --version), $(runc --version | head -1), $("${ctr[@]}" --version), $(criu --version | head -1)"
echo "export CUSNAP_PODMAN='${podman[*]}'"
echo "export CUSNAP_CTR='${ctr[*]}'"
