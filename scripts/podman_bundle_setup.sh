#!/usr/bin/env bash
# setup.sh of a Podman bundle (scripts/podman_bundle.sh): run on the target machine, from
# wherever the bundle lies,
#
#   <bundle>/setup.sh [--unpack DIR] [--state DIR] [--criu PATH]
#
# unpacks bundle.tar.xz into --unpack (default /tmp/cusnap-podman-bundle; again when the
# archive changed; outside the bundle, which stays small enough to carry), points the ELF
# interpreter and the rpath of podman, runc and conmon at the unpacked loader and
# libraries (patchelf run through the bundled loader: the target's glibc may be older than the
# one the programs were built against), checks that the loader resolves every library they
# need inside the bundle, and writes what Podman 4.3 reads when there is no /etc/containers:
# <unpack>/etc/{containers.conf,storage.conf,registries.conf,policy.json}, storage (vfs) and
# state under --state (default <unpack>/state), file locks and events (nothing shared
# with another Podman of the machine), no registry, CNI as the network backend (no helper is
# run with --network=none), no pids limit (runc would write pids.max, which a cgroup v2 tree
# without the pids controller delegated lacks), no AppArmor profile or SELinux label (the
# target may have neither the parser nor the policy); conmon gets the same configuration for
# the `podman container cleanup` it runs when a container exits (file locks on both sides).
# <unpack>/podman is the command line to use (a script: the environment and global options
# below, then its arguments); the last line of the output, PODMAN=<path>, names it.
#
# --criu: the CRIU runc runs for checkpoint and restore (runc's --criu option, and first on
# PATH for Podman's own version check and conmon's runc); default: `criu` on PATH, else
# <bundle>/../.criu/bin/criu (scripts/fetch_criu.sh's, carried beside the bundle).
set -euo pipefail

bundle=$(cd "$(dirname "$0")" && pwd)
b=/tmp/cusnap-podman-bundle
state=""
criu=""
while (($#)); do
  case $1 in
    --unpack) b=$2; shift 2 ;;
    --state) state=$2; shift 2 ;;
    --criu) criu=$2; shift 2 ;;
    *) echo "usage: $0 [--unpack DIR] [--state DIR] [--criu PATH]" >&2; exit 2 ;;
  esac
done
mkdir -p "$b"
b=$(cd "$b" && pwd)
state=${state:-$b/state}

fail() { echo "podman bundle setup: $*" >&2; exit 1; }

[[ $(uname -m) == x86_64 ]] || fail "the bundle is for x86-64, this machine is $(uname -m)"
if [[ -z $criu ]]; then
  criu=$(command -v criu || true)
  [[ -n $criu ]] || criu=$bundle/../.criu/bin/criu
fi
[[ -x $criu ]] || fail "no CRIU at '$criu' (--criu PATH; scripts/fetch_criu.sh's .criu/bin/criu)"
criu=$(cd "$(dirname "$criu")" && pwd)/$(basename "$criu")

sum=$(cksum <"$bundle/bundle.tar.xz")
if [[ $(cat "$b/.unpacked" 2>/dev/null) != "$sum" ]]; then
  rm -rf "${b:?}/bin" "${b:?}/lib" "${b:?}/.unpacked"
  if command -v xz >/dev/null && command -v tar >/dev/null; then
    tar -C "$b" -xJf "$bundle/bundle.tar.xz"
  else  # python3's tarfile and lzma where the machine has no xz or tar
    python3 -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])' "$bundle/bundle.tar.xz" "$b"
  fi
  ld=$b/lib/ld-linux-x86-64.so.2
  for p in podman runc conmon; do
    "$ld" --library-path "$b/lib" "$b/bin/patchelf" --set-interpreter "$ld" --force-rpath \
      --set-rpath "$b/lib" "$b/bin/$p" || fail "patchelf could not rewrite $b/bin/$p"
  done
  echo "$sum" >"$b/.unpacked"
fi
ld=$b/lib/ld-linux-x86-64.so.2

# Every library each program loads resolves into the bundle (the loader's own listing).
for p in podman runc conmon; do
  listed=$("$ld" --list "$b/bin/$p") || fail "the bundled loader cannot load $b/bin/$p: $listed"
  outside=$(awk '$2 == "=>" && index($3, "'"$b"'/lib/") != 1 { print }' <<<"$listed")
  [[ -z $outside ]] || fail "$p loads libraries from outside the bundle: $outside"
done

mkdir -p "$b/etc" "$b/cni" "$state"/{root,run,tmp,net}
cat >"$b/etc/storage.conf" <<CONF
[storage]
driver = "vfs"
graphroot = "$state/root"
runroot = "$state/run"
CONF
cat >"$b/etc/registries.conf" <<CONF
unqualified-search-registries = []
CONF
cat >"$b/etc/policy.json" <<CONF
{"default": [{"type": "insecureAcceptAnything"}]}
CONF
path="$(dirname "$criu"):/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
cat >"$b/etc/containers.conf" <<CONF
[containers]
log_driver = "k8s-file"
label = false
apparmor_profile = "unconfined"
pids_limit = 0

[engine]
cgroup_manager = "cgroupfs"
events_logger = "file"
lock_type = "file"
tmp_dir = "$state/tmp"
static_dir = "$state/root/libpod"
volume_path = "$state/root/volumes"
conmon_path = ["$b/bin/conmon"]
conmon_env_vars = ["PATH=$path", "CONTAINERS_CONF=$b/etc/containers.conf", "CONTAINERS_STORAGE_CONF=$b/etc/storage.conf", "CONTAINERS_REGISTRIES_CONF=$b/etc/registries.conf"]
helper_binaries_dir = ["$b/bin"]
runtime = "runc"

[engine.runtimes]
runc = ["$b/bin/runc"]

[network]
network_backend = "cni"
network_config_dir = "$state/net"
cni_plugin_dirs = ["$b/cni"]
CONF

cat >"$b/podman" <<CMD
#!/bin/sh
# Podman of the bundle $bundle, unpacked in $b (its setup.sh wrote this): its configuration, its state under $state,
# runc with the CRIU $criu.
export CONTAINERS_CONF=$b/etc/containers.conf CONTAINERS_STORAGE_CONF=$b/etc/storage.conf
export CONTAINERS_REGISTRIES_CONF=$b/etc/registries.conf PATH=$path
exec $b/bin/podman --root $state/root --runroot $state/run --tmpdir $state/tmp \\
  --cgroup-manager=cgroupfs --storage-driver=vfs --events-backend=file \\
  --network-config-dir $state/net --runtime=$b/bin/runc --conmon=$b/bin/conmon \\
  --runtime-flag criu=$criu "\$@"
CMD
chmod 0755 "$b/podman"

version=$("$b/podman" --version) || fail "the bundled podman does not run"
echo "podman bundle: $version, $("$b/bin/runc" --version | head -1), $("$b/bin/conmon" --version | head -1); CRIU $criu"
echo "podman bundle: policy $b/etc/policy.json (image pulls only: podman ... --signature-policy it)"
echo "podman bundle: command line (or $b/podman <args>):"
echo "  CONTAINERS_CONF=$b/etc/containers.conf CONTAINERS_STORAGE_CONF=$b/etc/storage.conf" \
     "CONTAINERS_REGISTRIES_CONF=$b/etc/registries.conf PATH=$path" \
     "$b/bin/podman --root $state/root --runroot $state/run --tmpdir $state/tmp" \
     "--cgroup-manager=cgroupfs --storage-driver=vfs --events-backend=file" \
     "--network-config-dir $state/net --runtime=$b/bin/runc --conmon=$b/bin/conmon --runtime-flag criu=$criu <args>"
echo "PODMAN=$b/podman"
