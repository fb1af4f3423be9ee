#!/usr/bin/env python3
"""Build check of libcusnap.so (DESIGN.md "Shim").

Asserts, on the built library:
  1. its exported dynamic symbols are exactly the rows of src/shim/driver/entry_points.def and
     of the generated gated_entry_points.def (every other driver entry point of cuda.h; parsed
     here, independently of the version script generated from the same file) plus `dlsym`
     and `cusnap_build_info`;
  2. no NEEDED libcuda, libcudart, libstdc++ or libgcc_s (sanitizer runtimes only when
     --sanitize is given, i.e. in the asan build);
  3. no glibc symbol version newer than GLIBC_2.34, and no GLIBCXX / CXXABI version at all;
  4. linked with -z defs: the option is among the target's link options, and every undefined
     symbol is bound to a glibc version (or, in the asan build, defined by a NEEDED sanitizer
     runtime).

Usage: build_check.py --library LIB --table entry_points.def --table gated_entry_points.def --link-options "OPTS" [--sanitize]
Exit status 0 when every check passes; each failure is printed on its own line.
"""
import argparse
import os
import re
import subprocess
import sys

GLIBC_CEILING = (2, 34)
FORBIDDEN_NEEDED = ("libcuda.so", "libcudart.so", "libstdc++.so", "libgcc_s.so")
SANITIZER_RUNTIMES = ("libasan.so", "libubsan.so", "liblsan.so", "libtsan.so")
EXTRA_EXPORTS = {"dlsym", "cusnap_build_info"}
ROW = re.compile(r"^CUSNAP_(?:DRIVER|RUNTIME|GATED)_ENTRY\(\s*(\w+)\s*,")


def table_symbols(path):
    with open(path, encoding="utf-8") as table:
        return {m.group(1) for m in map(ROW.match, table) if m}


def run(*argv):
    return subprocess.run(argv, check=True, capture_output=True, text=True).stdout


def dynamic_symbols(path):
    """(name, version, defined, bind) for each dynamic symbol, from readelf --dyn-syms."""
    symbols = []
    for line in run("readelf", "--dyn-syms", "--wide", path).splitlines():
        fields = line.split()
        if len(fields) < 8 or not fields[0].rstrip(":").isdigit():
            continue
        name, _, version = fields[7].partition("@")
        if not name:
            continue
        symbols.append((name, version.lstrip("@"), fields[6] != "UND", fields[4]))
    return symbols


def needed(path):
    return re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", run("readelf", "-d", path))


def resolved_paths(path):
    """NEEDED soname -> file, from ldd."""
    paths = {}
    for line in run("ldd", path).splitlines():
        m = re.match(r"\s*(\S+) => (\S+)", line)
        if m:
            paths[m.group(1)] = m.group(2)
    return paths


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--library", required=True)
    parser.add_argument("--table", required=True, action="append")
    parser.add_argument("--link-options", required=True)
    parser.add_argument("--sanitize", action="store_true")
    args = parser.parse_args()
    failures = []
    library = args.library

    # 1. Exports.
    expected = set().union(*map(table_symbols, args.table)) | EXTRA_EXPORTS
    if len(expected) <= len(EXTRA_EXPORTS):
        failures.append(f"no rows parsed from {args.table}")
    symbols = dynamic_symbols(library)
    exported = {name for name, _, defined, bind in symbols if defined and bind in ("GLOBAL", "WEAK")}
    for name in sorted(expected - exported):
        failures.append(f"{library}: table symbol {name} is not exported")
    for name in sorted(exported - expected):
        failures.append(f"{library}: {name} is exported but is not in the table")

    # 2. NEEDED.
    sonames = needed(library)
    for soname in sonames:
        if soname.startswith(FORBIDDEN_NEEDED):
            failures.append(f"{library}: NEEDED {soname} is forbidden")
        if soname.startswith(SANITIZER_RUNTIMES) and not args.sanitize:
            failures.append(f"{library}: NEEDED {soname} outside the sanitizer build")

    # 3. Symbol versions.
    for name, version, _, _ in symbols:
        m = re.match(r"GLIBC_(\d+)\.(\d+)", version)
        if m and (int(m.group(1)), int(m.group(2))) > GLIBC_CEILING:
            failures.append(f"{library}: {name} needs {version}, newer than GLIBC_2.34")
        if version.startswith(("GLIBCXX_", "CXXABI_")):
            failures.append(f"{library}: {name} needs {version} (libstdc++ must be static)")
    versions = run("readelf", "-V", "--wide", library)
    for major, minor in re.findall(r"Name: GLIBC_(\d+)\.(\d+)", versions):
        if (int(major), int(minor)) > GLIBC_CEILING:
            failures.append(f"{library}: version need GLIBC_{major}.{minor} is newer than GLIBC_2.34")

    # 4. -z defs.
    if "-z,defs" not in args.link_options and "-zdefs" not in args.link_options:
        failures.append(f"libcusnap.so link options lack -Wl,-z,defs: {args.link_options}")
    sanitizer_definitions = set()
    if args.sanitize:
        for soname, path in resolved_paths(library).items():
            if soname.startswith(SANITIZER_RUNTIMES):
                out = run("nm", "-D", "--defined-only", path)
                sanitizer_definitions |= {line.split()[-1].split("@")[0] for line in out.splitlines() if line.strip()}
    for name, version, defined, bind in symbols:
        if defined or bind == "WEAK" or version.startswith("GLIBC_"):
            continue
        if name in sanitizer_definitions:
            continue
        failures.append(f"{library}: undefined symbol {name} is bound to no glibc version")

    for failure in failures:
        print("FAIL:", failure)
    print(f"checked {os.path.basename(library)}: {len(exported)} exported symbols, NEEDED {sonames}, "
          f"{len(failures)} failure(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
