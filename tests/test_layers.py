#!/usr/bin/env python3
"""The layers below the CLI stay below it: no dependency circle can come back.

Usage: test_layers.py SOURCE_DIR

Checks the #include lines of
  - bench/: the benchmarks may use the argument library (cli/flags.h, cli/args.h) and the
    layers under the CLI, never another cli/ header (the CLI dispatches to bench, so bench
    including the CLI would be a circle);
  - the argument library itself (src/cli/flags.[ch], args.[ch], config.[ch]): it depends on
    no command (cli.h, train_*.h, run.h, ...) and not on bench/;
  - src/ outside src/cli/: no cli/ or bench/ header.

Exits 1 listing each offending include as file:line, 0 when there is none.
"""
import os
import re
import sys

INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')
LIBRARY = {"cli/flags.h", "cli/args.h", "cli/config.h"}
LIBRARY_FILES = {"flags.c", "flags.h", "args.c", "args.h", "config.c", "config.h"}


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
    for path in sources(os.path.join(top, "bench")):
        for n, inc in includes(path):
            if inc.startswith("cli/") and inc not in LIBRARY:
                bad.append(f"{os.path.relpath(path, top)}:{n}: bench includes {inc} (the CLI)")
    for name in sorted(LIBRARY_FILES):
        path = os.path.join(top, "src", "cli", name)
        if not os.path.exists(path):
            bad.append(f"src/cli/{name}: missing (the argument library)")
            continue
        for n, inc in includes(path):
            if (inc.startswith("cli/") and inc not in LIBRARY) or inc.startswith("bench/"):
                bad.append(f"src/cli/{name}:{n}: the argument library includes {inc}")
    src = os.path.join(top, "src")
    for path in sources(src):
        if os.path.relpath(path, src).startswith("cli" + os.sep):
            continue
        for n, inc in includes(path):
            if inc.startswith(("cli/", "bench/")):
                bad.append(f"{os.path.relpath(path, top)}:{n}: a layer under the CLI includes {inc}")
    for b in bad:
        print(b)
    if not bad:
        print("layers: bench/ and the argument library include no command's header")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
