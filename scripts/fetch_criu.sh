#!/usr/bin/env bash
# Fetches CRIU's source with apt and builds it into .criu/ (ignored by git): the `criu` program
# for `cusnap dump` and `cusnap restore --images-dir` (cusnap finds it through CUSNAP_CRIU,
# else PATH; this script prints the CUSNAP_CRIU to export), CRIU's plugin header for
# libcusnap_criu.so (src/criu_plugin), and CRIU's own CUDA plugin for the test that runs both
# plugins side by side:
#   .criu/bin/criu                   criu with its libraries (.criu/lib)
#   .criu/include/criu-plugin.h      CRIU's plugin API
#   .criu/plugins/cuda_plugin.so     CRIU's CUDA plugin (plugins/cuda of CRIU's tree)
#   .criu/include/cusnap-criu-opts.h where the options a plugin must read (the dumped tree's
#                                    root, --leave-running, pre-dump's memory tracking, lazy
#                                    pages, the image streamer) lie in that CRIU's global
#                                    `opts`, and its version: CRIU hands a plugin nothing but
#                                    the stage, and runc passes these over RPC, not argv
# CUSNAP_CRIU_DIR sets another folder. Safe to run again: it does nothing when all three are
# there and criu runs.
#
# Which CRIU, and why (docs/DUMP.md): every machine of this project runs kernel
# 6.18. Debian 12's criu 3.17 fails there ("vdso: Unexpected rt vDSO area bounds"); trixie's
# 4.1.1 fails dumping TCP sockets (getsockopt SO_PASSCRED/SO_PASSSEC answers EOPNOTSUPP on 6.18
# for non-unix sockets; 4.2 asks only unix and netlink sockets); sid's 4.2.1 and experimental's
# 4.3 work, but their binary packages need glibc 2.38 and the CPU machines have Debian 12's
# 2.36. So this script takes sid's *source* package (the upstream tarball) with apt-get source
# through a private source list and state directory (the machine's own apt setup is left
# alone), installs the build dependencies from the machine's own suite, and builds the `criu`
# binary and the CUDA plugin (no documentation, no other plugins). The libraries criu links
# (libprotobuf-c, libnl, libnet, libnftables, gnutls, ...) are copied next to it in .criu/lib,
# so the folder can be carried to a machine that lacks them (tests/gpu/README.md): the binary
# needs glibc >= 2.36.
#
# The mirror is the machine's own: the first Debian archive its apt configuration names
# (one-line *.list entries and deb822 *.sources, in apt's order), asked for the sid suite;
# CUSNAP_CRIU_MIRROR overrides it, CUSNAP_CRIU_SUITE the suite (sid or newer: experimental).
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
dest="${CUSNAP_CRIU_DIR:-$root/.criu}"
version="${CUSNAP_CRIU_VERSION:-4.2.1}"
suite="${CUSNAP_CRIU_SUITE:-sid}"

# apt_debian_mirror: the machine's own Debian archive.
source "$root/scripts/apt_mirror.sh"

if [[ -x "$dest/bin/criu" ]] && "$dest/bin/criu" --version >/dev/null 2>&1 &&
   [[ -f "$dest/include/criu-plugin.h" && -f "$dest/include/cusnap-criu-opts.h" &&
      -f "$dest/plugins/cuda_plugin.so" ]]; then
  echo "fetch_criu: $("$dest/bin/criu" --version | head -1) already in $dest/bin"
  echo "export CUSNAP_CRIU=$dest/bin/criu"
  exit 0
fi

mirror="${CUSNAP_CRIU_MIRROR:-$(apt_debian_mirror || true)}"
if [[ -z $mirror ]]; then
  echo "fetch_criu: no Debian archive in apt's sources (/etc/apt/sources.list," \
       "/etc/apt/sources.list.d/*.list or *.sources); set CUSNAP_CRIU_MIRROR to one" >&2
  exit 1
fi

sudo_cmd=""
[[ $(id -u) -ne 0 ]] && sudo_cmd="sudo"
deps=(make gcc pkgconf dpkg-dev xz-utils libbsd-dev libcap-dev libgnutls28-dev libnet1-dev
      libnftables-dev libnl-3-dev libprotobuf-c-dev libprotobuf-dev protobuf-c-compiler
      protobuf-compiler uuid-dev python3-protobuf)
missing=()
for p in "${deps[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "fetch_criu: installing build dependencies ${missing[*]}"
  $sudo_cmd apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

work=$(mktemp -d /tmp/cusnap-criu.XXXXXX)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/lists/partial" "$work/cache/archives/partial" "$work/src"
echo "deb-src $mirror $suite main" > "$work/sources.list"
apt_opts=(-o "Dir::Etc::SourceList=$work/sources.list" -o Dir::Etc::SourceParts=/dev/null
          -o "Dir::State::Lists=$work/lists" -o "Dir::Cache=$work/cache"
          -o APT::Sandbox::User=root)
echo "fetch_criu: criu $version source from $suite on $mirror"
apt-get "${apt_opts[@]}" update -qq
# The suite's Debian revision of that upstream version (4.2.1-1 in sid, 4.3-1~exp2 in
# experimental).
debian_version=$(apt-cache "${apt_opts[@]}" showsrc criu 2>/dev/null |
                 awk -v v="$version" '$1 == "Version:" && index($2, v "-") == 1 { print $2; exit }')
if [[ -z $debian_version ]]; then
  echo "fetch_criu: criu $version is not in $suite on $mirror" \
       "(set CUSNAP_CRIU_VERSION / CUSNAP_CRIU_SUITE / CUSNAP_CRIU_MIRROR)" >&2
  exit 1
fi
# Only the upstream tarball is needed (Debian's packaging builds documentation we skip); the
# .debian.tar.xz is not always on the mirror, so its failure is not fatal.
(cd "$work/src" && apt-get "${apt_opts[@]}" source --download-only "criu=$debian_version" \
   >"$work/source.log" 2>&1) || true
tarball=$(compgen -G "$work/src/criu_$version.orig.tar.*" | head -1) || true
if [[ -z $tarball ]]; then
  echo "fetch_criu: $suite lists criu $debian_version, but $mirror does not serve its upstream" \
       "tarball; apt-get source said:" >&2
  grep -A1 -E '^Err:' "$work/source.log" | grep -v '^--' | head -4 >&2
  echo "fetch_criu: scripts/fetch_criu_binary.sh fetches its binary package instead, for" \
       "cusnap dump / restore (not for the CRIU plugin, which needs CRIU's source)" >&2
  exit 1
fi
tar -xf "$tarball" -C "$work/src"
tree="$work/src/criu-$version"
echo "fetch_criu: building criu and its CUDA plugin (a few minutes on 2 cores)"
# cuda_plugin depends on criu in CRIU's Makefile, so one target builds both.
make -C "$tree" -j"$(nproc)" cuda_plugin > "$work/build.log" 2>&1 ||
  { tail -30 "$work/build.log" >&2; echo "fetch_criu: build failed" >&2; exit 1; }
mkdir -p "$dest/bin" "$dest/lib" "$dest/include" "$dest/plugins"
install -m 0755 "$tree/criu/criu" "$dest/bin/criu.real"
install -m 0644 "$tree/criu/include/criu-plugin.h" "$dest/include/criu-plugin.h"
install -m 0755 "$tree/plugins/cuda/cuda_plugin.so" "$dest/plugins/cuda_plugin.so"
# The offsets come from the compiler, on the tree just built (its generated headers included),
# with the include folders CRIU's own plugins are built with.
cat > "$work/opts_probe.c" <<'PROBE'
#include <stddef.h>
#include <stdio.h>
#include "cr_options.h"
#include "version.h"
#include "pid.h"
#define FIELD(name, field) \
  printf("#define CUSNAP_CRIU_OPTS_%s_OFFSET %zu\n#define CUSNAP_CRIU_OPTS_%s_SIZE %zu\n", name, \
         offsetof(struct cr_options, field), name, sizeof(((struct cr_options *)0)->field))
int main(void) {
  printf("#define CUSNAP_CRIU_VERSION \"%s\"\n", CRIU_VERSION);
  FIELD("TREE_ID", tree_id);
  FIELD("FINAL_STATE", final_state);
  FIELD("TRACK_MEM", track_mem);
  FIELD("LAZY_PAGES", lazy_pages);
  FIELD("STREAM", stream);
  printf("#define CUSNAP_CRIU_TASK_ALIVE %d\n", TASK_ALIVE);
  return 0;
}
PROBE
arch="$(uname -m | sed 's/x86_64/x86/')"
gcc -o "$work/opts_probe" "$work/opts_probe.c" $("$tree/compel/compel-host" includes) \
    -iquote "$tree/include" -iquote "$tree/criu/include" -iquote "$tree/criu/arch/$arch/include" \
    -iquote "$tree" >"$work/probe.log" 2>&1 ||
  { tail -20 "$work/probe.log" >&2; echo "fetch_criu: the options probe did not build" >&2; exit 1; }
{
  echo "// Written by scripts/fetch_criu.sh from CRIU $version's cr_options.h: where a plugin"
  echo "// finds what it must read in the running criu's global \`opts\` (valid for that version only)."
  echo "#pragma once"
  "$work/opts_probe"
} > "$dest/include/cusnap-criu-opts.h"
# The libraries it links, except glibc's own, so that the folder runs where they are missing.
ldd "$dest/bin/criu.real" | awk '$3 ~ /^\// {print $3}' | while read -r lib; do
  case "$(basename "$lib")" in libc.so.*|libm.so.*|libdl.so.*|libpthread.so.*|ld-linux*) continue;; esac
  cp -L "$lib" "$dest/lib/"
done
cat > "$dest/bin/criu" <<'WRAP'
#!/bin/sh
# criu with the libraries it was built against (scripts/fetch_criu.sh).
here=$(dirname "$(readlink -f "$0")")
LD_LIBRARY_PATH="$here/../lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" exec "$here/criu.real" "$@"
WRAP
chmod 0755 "$dest/bin/criu"
echo "fetch_criu: $("$dest/bin/criu" --version | head -1) in $dest/bin, criu-plugin.h in" \
     "$dest/include, cuda_plugin.so in $dest/plugins; criu check says:"
"$dest/bin/criu" check 2>&1 | grep -v RLIMIT_NOFILE | tail -3 || true
echo "export CUSNAP_CRIU=$dest/bin/criu"
