#!/usr/bin/env bash
# docs/embedding.md shows examples/minimal/minimal.c and python/examples/zero3_numpy.py
# verbatim (both are run by the example_mlp and python tests). Usage: test_docs_examples.sh SRC
set -euo pipefail
S=$1
block() { awk -v lang="$1" '$0 == "```" lang {on = 1; next} on && /^```$/ {exit} on' "$S/docs/embedding.md"; }
diff <(block c) "$S/examples/minimal/minimal.c" || { echo "FAIL: C example differs" >&2; exit 1; }
diff <(block python) "$S/python/examples/zero3_numpy.py" || { echo "FAIL: Python example differs" >&2; exit 1; }
echo "docs/embedding.md: both examples are the tested files"
