#!/usr/bin/env bash
# Fetches a CRIU that Debian ships as a binary package but whose source the machine's archive
# does not serve (experimental's 4.3: its upstream tarball answers 404, docs/DUMP.md) into a
# folder that runs on this project's machines (glibc 2.36 and newer):
#   DEST/bin/criu       a wrapper that starts DEST/bin/criu.real through the bundled glibc's
#                       own loader (--library-path), so that neither the programs CRIU runs nor
#                       the processes it restores see that glibc (LD_LIBRARY_PATH would leak)
#   DEST/lib            the package's libcompel, sid's glibc (the package needs a newer one
#                       than Debian 12's), and every other library criu links: the machine's
#                       own where it has one, else the package's dependency from the archive
# It is for measuring that CRIU against the one scripts/fetch_criu.sh builds
# (bench/criu_versions.py, bench/gpu_images_vs_native.py --criu) and for `cusnap dump` /
# `restore --images-dir` (CUSNAP_CRIU=DEST/bin/criu). It brings no plugin header: the CRIU
# plugin (libcusnap_criu.so) reads CRIU's option offsets from a source tree, so it builds
# against fetch_criu.sh's CRIU only, and refuses another version when loaded.
#
#   scripts/fetch_criu_binary.sh [DEST]     DEST defaults to .criu-binary
# CUSNAP_CRIU_VERSION (default 4.3) and CUSNAP_CRIU_SUITE (default experimental) pick the
# package; CUSNAP_CRIU_MIRROR overrides the machine's own Debian archive.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
dest=$(realpath -m "${1:-$root/.criu-binary}")
version="${CUSNAP_CRIU_VERSION:-4.3}"
suite="${CUSNAP_CRIU_SUITE:-experimental}"
source "$root/scripts/apt_mirror.sh"
mirror="${CUSNAP_CRIU_MIRROR:-$(apt_debian_mirror || true)}"
if [[ -z $mirror ]]; then
  echo "fetch_criu_binary: no Debian archive in apt's sources; set CUSNAP_CRIU_MIRROR" >&2
  exit 1
fi

work=$(mktemp -d /tmp/cusnap-criu-binary.XXXXXX)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/lists/partial" "$work/cache/archives/partial" "$work/debs" "$work/stage"
printf 'deb %s %s main\ndeb %s sid main\n' "$mirror" "$suite" "$mirror" > "$work/sources.list"
: > "$work/status"
apt_opts=(-o "Dir::Etc::SourceList=$work/sources.list" -o Dir::Etc::SourceParts=/dev/null
          -o "Dir::State::Lists=$work/lists" -o "Dir::Cache=$work/cache"
          -o "Dir::State::status=$work/status" -o APT::Sandbox::User=root)
echo "fetch_criu_binary: criu $version from $suite on $mirror"
apt-get "${apt_opts[@]}" update -qq
debian_version=$(apt-cache "${apt_opts[@]}" madison criu |
                 awk -v v="$version" '$3 ~ "^" v "-" { print $3; exit }')
if [[ -z $debian_version ]]; then
  echo "fetch_criu_binary: criu $version is not in $suite on $mirror" >&2
  exit 1
fi

# Downloads package `$1` (apt's name=version or name/suite) into $work/debs, unpacks it into
# $work/stage, and prints its dependencies' names (the first of each alternative).
fetch() {
  rm -f "$work"/debs/*.deb
  (cd "$work/debs" && apt-get "${apt_opts[@]}" download "$1" >/dev/null 2>&1) ||
    { echo "fetch_criu_binary: cannot download $1 (left out)" >&2; return 0; }
  local deb
  deb=$(ls "$work"/debs/*.deb)
  dpkg-deb -x "$deb" "$work/stage"
  dpkg-deb -f "$deb" Depends Pre-Depends | tr ',' '\n' | sed -E 's/^[A-Za-z-]+://; s/^ +//; s/\|.*//; s/[ :(].*$//; /^$/d'
}

# The package, then the closure of its dependencies from sid (the glibc it needs is sid's, so
# libraries built against it are too); the machine's own libraries are not mixed in (Debian
# 12's libnl-3 lacks the symbol versions 4.3 asks for), and the GPU machines have none.
queue=$(fetch "criu=$debian_version")
seen=" criu "
while [[ -n $queue ]]; do
  next=""
  for pkg in $queue; do
    [[ $seen == *" $pkg "* ]] && continue
    seen+="$pkg "
    if [[ $pkg == libcompel1 ]]; then next+=" $(fetch "libcompel1=$debian_version")"; else next+=" $(fetch "$pkg/sid")"; fi
  done
  queue=$next
done
rm -rf "$dest/bin" "$dest/lib"  # a CRIU fetched before: no library of it stays
mkdir -p "$dest/bin" "$dest/lib"
install -m 0755 "$work/stage/usr/sbin/criu" "$dest/bin/criu.real"
# The libraries themselves and their soname links (not lib64's link to the loader, nor
# glibc's gconv modules below).
for libdir in "$work/stage/usr/lib/x86_64-linux-gnu" "$work/stage/lib/x86_64-linux-gnu"; do
  [[ -d $libdir ]] && find "$libdir" -maxdepth 1 -name '*.so*' \( -type f -o -type l \) \
                           -exec cp -a {} "$dest/lib/" \;
done
loader="$dest/lib/ld-linux-x86-64.so.2"
trace=$(LD_TRACE_LOADED_OBJECTS=1 "$loader" --library-path "$dest/lib" "$dest/bin/criu.real" 2>&1)
if grep -q -E 'not found|version' <<<"$trace" || grep -v -E "=> $dest/lib/|linux-vdso|^\s*$dest/lib/" <<<"$trace" | grep -q '=>'; then
  echo "fetch_criu_binary: criu $debian_version does not find everything it links in $dest/lib:" >&2
  echo "$trace" >&2
  exit 1
fi
cat > "$dest/bin/criu" <<'WRAP'
#!/bin/sh
# criu of a Debian binary package, through the glibc it was built for (scripts/fetch_criu_binary.sh).
here=$(dirname "$(readlink -f "$0")")
exec "$here/../lib/ld-linux-x86-64.so.2" --library-path "$here/../lib" "$here/criu.real" "$@"
WRAP
chmod 0755 "$dest/bin/criu"
echo "fetch_criu_binary: $("$dest/bin/criu" --version | head -1) in $dest/bin; criu check says:"
"$dest/bin/criu" check 2>&1 | grep -v RLIMIT_NOFILE | tail -2 || true
echo "export CUSNAP_CRIU=$dest/bin/criu"
