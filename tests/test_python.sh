#!/usr/bin/env bash
# The Python package (python/) under pytest, installed with pip into BUILD_DIR/pyvenv as
# scripts/setup.sh does (reinstalled here, offline, so the suite runs the tree's package, with
# BUILD_DIR's library and executable bundled into it), then docs/embedding.md's Python example
# on 2 ranks. The suite runs without ZSHARD_LIB/ZSHARD_EXE: the installed package finds what it
# bundles. Skips (77) only when python3 is missing, and in the sanitizer build.
# Usage: test_python.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
B=$(cd "$1" && pwd)
S=$(cd "$2" && pwd)
command -v python3 >/dev/null || { echo "python3 missing: skipped"; exit 77; }
if grep -q '^ZS_SANITIZE:BOOL=ON$' "$B/CMakeCache.txt"; then
    echo "SKIP: a sanitizer build (scripts/sanitize.sh): Python would load its ASan-instrumented" \
         "libzshard.so without ASan's runtime, and it makes no pyvenv"
    exit 77
fi
PY=$B/pyvenv/bin/python
[ -x "$PY" ] || { echo "FAIL: $B/pyvenv missing: run scripts/setup.sh" >&2; exit 1; }
ZSHARD_LIB=$B/libzshard.so ZSHARD_EXE=$B/zshard \
    "$PY" -m pip install -q --no-deps --no-build-isolation --force-reinstall "$S/python"
unset ZSHARD_LIB ZSHARD_EXE
T=$(mktemp -d /tmp/zshard-python-XXXXXX)
trap 'rm -rf "$T"' EXIT
cd "$T" # not the source tree: the installed package is the one imported
"$PY" -m pytest -q -p no:cacheprovider "$S/python/tests"
"$B/zshard" run -n 2 -- "$PY" "$S/python/examples/zero3_numpy.py" > out.txt 2>&1 ||
    { cat out.txt; echo "FAIL: docs example" >&2; exit 1; }
cat out.txt
grep -q "states \[512, 512\]" out.txt || { echo "FAIL: model states != 16 * 64 / 2" >&2; exit 1; }
