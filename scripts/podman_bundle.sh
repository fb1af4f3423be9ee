#!/usr/bin/env bash
# Packs Podman, runc, conmon and patchelf of this machine (Debian 12's packages) with every
# shared library they load, glibc and its dynamic loader among them, into one folder that runs
# on a machine without Podman or a package registry (a GPU machine the project lends):
#
#   scripts/podman_bundle.sh [<dir>]          (default <source>/.podman, git-ignored)
#
# <dir> gets bundle.tar.xz (bin/ and lib/), setup.sh (scripts/podman_bundle_setup.sh: run
# there, it unpacks the bundle, points the programs' ELF interpreter and rpath at the bundle's
# own absolute path and writes the configuration Podman needs) and versions.txt. The
# programs' libraries are found by `ldd` here, so the bundle holds their whole closure:
# nothing of the target's own libraries is loaded by them. libgcc_s goes along too: glibc
# loads it at run time (thread cancellation, unwinding), which `ldd` does not show.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
dest=${1:-$root/.podman}
programs=(/usr/bin/podman /usr/sbin/runc /usr/bin/conmon /usr/bin/patchelf)

fail() { echo "podman_bundle: $*" >&2; exit 1; }

for p in "${programs[@]}"; do
  [[ -x $p ]] || fail "$p is missing (apt-get install podman runc conmon patchelf; scripts/container_tools.sh installs the first three)"
done

stage=$(mktemp -d /tmp/cusnap-podman-bundle.XXXXXX)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/bin" "$stage/lib"

# The libraries `ldd` resolves for a program, and its loader, one path a line.
libraries_of() {
  ldd "$1" | awk '$2 == "=>" && $3 ~ /^\// { print $3 } $1 ~ /^\/.*ld-linux/ { print $1 }'
}

for p in "${programs[@]}"; do
  install -m 0755 "$p" "$stage/bin/$(basename "$p")"
  while IFS= read -r lib; do
    [[ -e $stage/lib/$(basename "$lib") ]] || cp -L "$lib" "$stage/lib/$(basename "$lib")"
  done < <(libraries_of "$p")
done
gcc_s=$(ldconfig -p | awk '/libgcc_s.so.1 .*x86-64/ { print $NF; exit }')
[[ -n $gcc_s ]] || fail "libgcc_s.so.1 not found (ldconfig -p)"
cp -L "$gcc_s" "$stage/lib/libgcc_s.so.1"
[[ -e $stage/lib/ld-linux-x86-64.so.2 ]] || fail "no ld-linux-x86-64.so.2 among the libraries (an x86-64 glibc machine is assumed)"
chmod 0755 "$stage/lib/"*

mkdir -p "$dest"
XZ_OPT=-9e tar -C "$stage" --owner=0 --group=0 -cJf "$dest/bundle.tar.xz.new" bin lib
mv "$dest/bundle.tar.xz.new" "$dest/bundle.tar.xz"
install -m 0755 "$root/scripts/podman_bundle_setup.sh" "$dest/setup.sh"
{
  echo "made $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(. /etc/os-release && echo "$PRETTY_NAME")"
  for pkg in podman runc conmon patchelf libc6; do dpkg-query -W -f='${Package} ${Version}\n' "$pkg"; done
  echo "libraries: $(cd "$stage/lib" && echo *)"
} >"$dest/versions.txt"
echo "podman_bundle: $dest/bundle.tar.xz ($(du -h "$dest/bundle.tar.xz" | cut -f1)), $(ls "$stage/lib" | wc -l) libraries;" \
     "run $dest/setup.sh on the target"
