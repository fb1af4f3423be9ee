#!/usr/bin/env bash
# tests/gpu/podman_gpu.sh on this CPU machine, as a GPU machine would run it: the C++ criu_job
# on the simulated driver, with this machine's own Podman, runc, conmon, crun, netavark, CNI
# plugins, containers configuration, ip and iptables hidden (bind mounts in a mount namespace of
# its own: nothing changes outside it), so that only the Podman bundle (.podman) and the CRIU
# (.criu, or CUSNAP_CRIU) the GPU machine gets are used.
#
#   tests/gpu/podman_gpu_here.sh <release build>     (root; OUT as podman_gpu.sh reads it)
#
# The hidden programs are replaced by one that says so and exits 127; the hidden folders by an
# empty one. Symbolic links are left (the file they name is hidden where listed).
set -euo pipefail

[[ $# -eq 1 && -d $1 ]] || { echo "usage: $0 <release build>" >&2; exit 2; }
[[ $(id -u) -eq 0 ]] || { echo "podman_gpu_here: needs root" >&2; exit 2; }
here=$(cd "$(dirname "$0")" && pwd)

if [[ ${PODMAN_GPU_HIDDEN:-} != 1 ]]; then
  PODMAN_GPU_HIDDEN=1 exec unshare -m --propagation private "$0" "$@"
fi

stand_in=$(mktemp -d /tmp/cusnap-pg-hide.XXXXXX)
trap 'rm -rf "$stand_in"' EXIT
mkdir "$stand_in/empty"
printf '#!/bin/sh\necho "hidden by podman_gpu_here: $0" >&2\nexit 127\n' >"$stand_in/absent"
chmod 0755 "$stand_in/absent"
for d in /etc/containers /usr/share/containers /usr/libexec/podman /usr/lib/cni /opt/cni/bin; do
  [[ -d $d ]] && mount --bind "$stand_in/empty" "$d"
done
for f in /usr/bin/podman /usr/sbin/runc /usr/bin/runc /usr/bin/conmon /usr/libexec/podman/conmon \
  /usr/bin/crun /usr/lib/podman/netavark /usr/libexec/podman/netavark /usr/local/sbin/criu /usr/sbin/criu \
  /usr/bin/ip /usr/sbin/ip /usr/sbin/xtables-nft-multi /usr/sbin/xtables-legacy-multi; do
  [[ -f $f && ! -L $f ]] && mount --bind "$stand_in/absent" "$f"
done
echo "podman_gpu_here: hidden: podman $(command -v podman || echo -) -> $(podman --version 2>&1 | head -1)"
"$here/podman_gpu.sh" "$1" --job criu_job
