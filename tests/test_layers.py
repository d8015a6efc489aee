#!/usr/bin/env python3
"""The layers below the CLI stay below it: no dependency circle can come back.

Usage: test_layers.py SOURCE_DIR

Checks the #include lines of
  - bench/: the benchmarks use the argument library (src/args) and the layers under the CLI,
    never a cli/ header (the CLI dispatches to bench, so bench including the CLI would be a
    circle);
  - the argument library (src/args): it includes no cli/ and no bench/ header;
  - the rest of src/ (everything but src/cli and src/args): no cli/, bench/ or args/ header.

Exits 1 listing each offending include as file:line, 0 when there is none.
"""
import os
import re
import sys

INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')


def includes(path):
    with open(path, encoding="utf-8", errors="replace") as f:
        for n, line in enumerate(f, 1):
            m = INCLUDE.match(line)
            if m:
                yield n, m.group(1)


def sources(folder):
    for root, _, files in os.walk(folder):
        for name in sorted(files):
            if name.endswith((".c", ".h", ".cc", ".cu")):
                yield os.path.join(root, name)


def main():
    top = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.dirname(__file__))
    bad = []
    seen = 0
    for path in sources(os.path.join(top, "bench")):
        seen += 1
        for n, inc in includes(path):
            if inc.startswith("cli/"):
                bad.append(f"{os.path.relpath(path, top)}:{n}: bench includes {inc} (the CLI)")
    lib = os.path.join(top, "src", "args")
    for name in ("flags.c", "flags.h", "args.c", "args.h"):
        if not os.path.exists(os.path.join(lib, name)):
            bad.append(f"src/args/{name}: missing (the argument library)")
    for path in sources(lib):
        seen += 1
        for n, inc in includes(path):
            if inc.startswith(("cli/", "bench/")):
                bad.append(f"{os.path.relpath(path, top)}:{n}: the argument library includes {inc}")
    src = os.path.join(top, "src")
    for path in sources(src):
        rel = os.path.relpath(path, src)
        if rel.startswith(("cli" + os.sep, "args" + os.sep)):
            continue
        seen += 1
        for n, inc in includes(path):
            if inc.startswith(("cli/", "bench/", "args/")):
                bad.append(f"{os.path.relpath(path, top)}:{n}: a layer under the CLI includes {inc}")
    for b in bad:
        print(b)
    if seen == 0:
        print("layers: no sources found under", top)
        return 1
    if not bad:
        print(f"layers: {seen} files; bench/ and src/args include no CLI header, the layers "
              "below include neither")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
