#!/usr/bin/env bash
# `cmake --install <build dir>` into <prefix> (emptied first), then the installed tree on its
# own: `cusnap --version` names the installed shim, the man page and the bash, zsh and fish
# completions are there, and `cusnap demo` passes on the simulated driver found under
# libexec/.
set -euo pipefail
build=$1 prefix=$2
rm -rf "$prefix"
cmake --install "$build" --prefix "$prefix" >/dev/null
for f in bin/cusnap libexec/cusnap/cusnap-demo-worker lib/libcusnap.so libexec/cusnap/simcuda/libcuda.so.1 \
         share/doc/cusnap/README.md share/man/man1/cusnap.1 share/bash-completion/completions/cusnap \
         share/zsh/site-functions/_cusnap share/fish/vendor_completions.d/cusnap.fish; do
  [[ -e $prefix/$f ]] || { echo "FAIL: $prefix/$f was not installed"; exit 1; }
done
[[ ! -e $prefix/bin/cusnap-demo-worker ]] ||
  { echo "FAIL: the demo's worker was installed in bin/, as if it were a user program"; exit 1; }
version=$("$prefix/bin/cusnap" --version)
echo "$version"
grep -q "^shim $prefix/bin/../lib/libcusnap.so: cusnap " <<<"$version" ||
  { echo "FAIL: --version does not name the installed shim"; exit 1; }
scratch=$(mktemp -d /tmp/cusnap-install.XXXXXX)
trap 'rm -rf "$scratch"' EXIT
# Nothing from the build tree: no driver choice, library path or control dir inherited.
out=$(env -u CUSNAP_DRIVER -u LD_LIBRARY_PATH -u LD_PRELOAD CUSNAP_CONTROL_DIR="$scratch/control" \
      SIMCUDA_DIR="$scratch/sim" "$prefix/bin/cusnap" demo)
echo "$out"
grep -Eq "^PASS: ([0-9]+)/\1 checks \(" <<<"$out" || { echo "FAIL: demo"; exit 1; }
echo "PASS: installed tree"
