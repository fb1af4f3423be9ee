#!/usr/bin/env python3
"""Generates gated_entry_points.def: every driver entry point cuda.h declares that the
hand-written table (entry_points.def) does not already list, as rows of the same shape

    CUSNAP_GATED_ENTRY(symbol, api_name, since, variant, params, args)

plus, for names cuda.h maps onto an entry point of another name (`#define cuGraphInstantiate
cuGraphInstantiateWithFlags`),

    CUSNAP_API_ALIAS(api_name, symbol)

so that a resolver asked for api_name hands out that entry point's wrapper (DESIGN.md, "Shim":
every driver entry point passes the gate).

Sources, all from the installed CUDA headers:
  - the declarations as a library defining the symbols sees them: cuda.h preprocessed with
    __CUDA_API_VERSION_INTERNAL (every versioned name declared as itself, the _ptds/_ptsz
    forms included), by the C++ compiler the shim is built with, so the parameter lists are
    exactly the ones the wrappers must match;
  - cudaTypedefs.h: PFN_<api_name>_v<version>[_ptds|_ptsz] gives every ABI of every api_name
    with the CUDA version from which the driver returns it. The n-th ABI (ascending version)
    of an api_name is its n-th symbol: api_name, api_name_v2, api_name_v3, ...

Usage: gen_gated_entry_points.py --cxx CXX --cuda-include DIR --table entry_points.def
                                  --output gated_entry_points.def
"""
import argparse
import os
import re
import subprocess
import sys

HAND_ROW = re.compile(r"^CUSNAP_(?:DRIVER|RUNTIME)_ENTRY\(\s*(\w+)\s*,", re.M)
PFN = re.compile(r"\bPFN_(cu\w+?)_v(\d+)(_ptds|_ptsz)?\s*\)")
DEFINE = re.compile(r"^\s*#define\s+(cu\w+)\s+(?:__CUDA_API_PT(?:DS|SZ)\((cu\w+)\)|(cu\w+))\s*$", re.M)
DECL_START = re.compile(r"\bCUresult\s+(cu\w+)\s*\(")
VERSION_SUFFIX = re.compile(r"^(cu\w+?)_v(\d+)$")


def preprocess(cxx, include_dir):
    source = "#define __CUDA_API_VERSION_INTERNAL 1\n#include <cuda.h>\n"
    return subprocess.run([cxx, "-E", "-P", "-x", "c++", "-I", include_dir, "-"], input=source,
                          check=True, capture_output=True, text=True).stdout


def declarations(text):
    """symbol -> parameter text, for every `CUresult cuX(...);` declaration."""
    found = {}
    for match in DECL_START.finditer(text):
        depth, i = 1, match.end()
        while depth and i < len(text):
            depth += {"(": 1, ")": -1}.get(text[i], 0)
            i += 1
        rest = text[i:i + 40].lstrip()
        if not rest.startswith(";"):
            continue  # a definition or a function-pointer typedef, not a declaration
        params = " ".join(text[match.end():i - 1].split())
        found.setdefault(match.group(1), params)
    return found


def split_params(params):
    parts, depth, current = [], 0, ""
    for ch in params:
        if ch == "," and depth == 0:
            parts.append(current.strip())
            current = ""
            continue
        depth += {"(": 1, ")": -1}.get(ch, 0)
        current += ch
    if current.strip():
        parts.append(current.strip())
    return parts


def argument_names(symbol, params):
    if params.strip() in ("", "void"):
        return []
    names = []
    for part in split_params(params):
        pointer = re.search(r"\(\s*\*\s*(\w+)\s*\)", part)  # a function-pointer parameter
        match = pointer or re.search(r"(\w+)\s*(?:\[[^\]]*\])*\s*$", part)
        if not match or match.group(1) in ("int", "char", "void", "size_t", "unsigned", "long"):
            sys.exit(f"gen_gated_entry_points: cannot name parameter '{part}' of {symbol}")
        names.append(match.group(1))
    return names


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--cxx", required=True)
    parser.add_argument("--cuda-include", required=True)
    parser.add_argument("--table", required=True)
    parser.add_argument("--output", required=True)
    args = parser.parse_args()

    with open(args.table, encoding="utf-8") as table:
        hand = set(HAND_ROW.findall(table.read()))
    with open(os.path.join(args.cuda_include, "cudaTypedefs.h"), encoding="utf-8") as header:
        typedefs = header.read()
    with open(os.path.join(args.cuda_include, "cuda.h"), encoding="utf-8") as header:
        cuda_h = header.read()
    decls = declarations(preprocess(args.cxx, args.cuda_include))

    # api_name -> {per_thread: sorted versions}
    versions = {}
    for api, version, pt in PFN.findall(typedefs):
        versions.setdefault(api, {}).setdefault(bool(pt), set()).add(int(version))

    rows, unversioned = [], []
    for symbol in sorted(decls):
        base, per_thread = symbol, False
        if symbol.endswith(("_ptds", "_ptsz")):
            base, per_thread = symbol[:-5], True
        api, rank = base, 1
        if base not in versions:
            match = VERSION_SUFFIX.match(base)
            if match and match.group(1) in versions:
                api, rank = match.group(1), int(match.group(2))
        known = sorted(versions.get(api, {}).get(per_thread, ()))
        if per_thread:
            # The per-thread ABIs follow the same order: the n-th per-thread typedef belongs
            # to the n-th symbol among those that have a per-thread form.
            pt_symbols = sorted((s for s in decls if s.endswith(("_ptds", "_ptsz")) and
                                 (s[:-5] == api or VERSION_SUFFIX.sub(r"\1", s[:-5]) == api)),
                                key=lambda s: int(VERSION_SUFFIX.match(s[:-5]).group(2))
                                if VERSION_SUFFIX.match(s[:-5]) and s[:-5] != api else 1)
            index = pt_symbols.index(symbol)
        else:
            index = rank - 1
        if index < len(known):
            since = known[index]
        elif known:
            since = known[-1]
        else:
            since = 0
            unversioned.append(symbol)
        if symbol in hand:
            continue
        params = decls[symbol]
        rows.append((symbol, api, since, "PTSZ" if per_thread else "DEFAULT", params,
                     ", ".join(argument_names(symbol, params))))

    # `#define cuX cuY` (cuY not a version of cuX): a resolver asked for cuX may return cuY.
    aliases = []
    row_symbols = {r[0] for r in rows} | hand
    for name, pt_target, target in DEFINE.findall(cuda_h):
        target = pt_target or target
        unthreaded = re.sub(r"_pt(?:ds|sz)$", "", target)
        if name in (target, unthreaded, VERSION_SUFFIX.sub(r"\1", unthreaded)) or \
                target not in row_symbols:
            continue
        aliases.append((name, target))

    out = ["// Generated by src/shim/driver/gen_gated_entry_points.py from the CUDA headers;",
           "// do not edit. Every driver entry point cuda.h declares that entry_points.def does",
           "// not list: the wrapper passes the gate and forwards (exports.cc).",
           "#ifndef CUSNAP_GATED_ENTRY",
           "#define CUSNAP_GATED_ENTRY(symbol, api_name, since, variant, params, args)",
           "#endif",
           "#ifndef CUSNAP_API_ALIAS",
           "#define CUSNAP_API_ALIAS(api_name, symbol)",
           "#endif"]
    for symbol, api, since, variant, params, arg_list in rows:
        out.append(f'CUSNAP_GATED_ENTRY({symbol}, "{api}", {since}, {variant},\n'
                   f"    ({params}),\n    ({arg_list}))")
    for name, target in sorted(set(aliases)):
        out.append(f'CUSNAP_API_ALIAS("{name}", {target})')
    out += ["#undef CUSNAP_GATED_ENTRY", "#undef CUSNAP_API_ALIAS", ""]
    text = "\n".join(out)
    try:
        with open(args.output, encoding="utf-8") as old:
            if old.read() == text:
                return
    except OSError:
        pass
    with open(args.output, "w", encoding="utf-8") as output:
        output.write(text)
    if unversioned:
        print(f"gen_gated_entry_points: no PFN typedef for {len(unversioned)} symbol(s) "
              f"(resolved at version 0 = by exported name only): {' '.join(unversioned[:8])}",
              file=sys.stderr)


if __name__ == "__main__":
    main()
