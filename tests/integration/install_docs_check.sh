#!/usr/bin/env bash
# `cmake --install <build dir>` into <prefix> (emptied first): the documents installed under
# share/doc/cusnap are README.md and exactly the documents of docs/ that README.md links, each
# where the link points from the installed README (share/doc/cusnap/docs/<name>), byte for
# byte as in the source tree; a linked document that is missing, or an installed one nothing
# links, fails.
set -euo pipefail
build=$1 prefix=$2 source=$3
fail() { echo "FAIL: $*"; exit 1; }
rm -rf "$prefix"
cmake --install "$build" --prefix "$prefix" >/dev/null
doc=$prefix/share/doc/cusnap
[[ -f $doc/README.md ]] || fail "README.md is not installed in $doc"
cmp -s "$source/README.md" "$doc/README.md" || fail "$doc/README.md differs from the source tree's"
linked=$(grep -oE 'docs/[A-Za-z0-9_.-]+\.md' "$source/README.md" | sort -u)
[[ -n $linked ]] || fail "README.md links no document of docs/"
installed=$(cd "$doc" && find . -type f ! -name README.md | sed 's|^\./||' | sort)
for d in $linked; do
  [[ -f $source/$d ]] || fail "README.md links $d, which the source tree does not have"
  [[ -f $doc/$d ]] || fail "README.md links $d, which is not installed in $doc"
  cmp -s "$source/$d" "$doc/$d" || fail "$doc/$d differs from the source tree's"
done
for d in $installed; do
  grep -qxF -- "$d" <<<"$linked" || fail "$doc/$d is installed but README.md does not link it"
done
echo "PASS: README.md and the $(wc -l <<<"$linked") documents it links are installed in $doc"
