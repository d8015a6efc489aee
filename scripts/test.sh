#!/usr/bin/env bash
# Set everything up (packages, build) and run the whole test suite through ctest, then the CPU
# suite under ASan+UBSan (scripts/sanitize.sh) and a short run of every fuzz target
# (scripts/fuzz.sh); docs/testing.md. Any failure fails the command. A step that cannot run
# here (exit 77: no clang) is reported as SKIPPED with its reason at the end: it neither fails
# the command nor counts as passed.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
# Tests run one at a time: multi-rank tests already use both cores, and running them side by
# side would only turn their timeouts into noise.
(cd build && ctest --output-on-failure --timeout 600 "$@")

log=$(mktemp)
trap 'rm -f "$log"' EXIT
skipped=()
for step in sanitize fuzz; do
    rc=0
    bash "scripts/$step.sh" 2>&1 | tee "$log" || rc=${PIPESTATUS[0]}
    if [ "$rc" = 77 ]; then
        skipped+=("scripts/$step.sh: $(grep -m1 'SKIP' "$log" || echo 'exit 77, no reason given')")
    elif [ "$rc" != 0 ]; then
        echo "test: FAILED: scripts/$step.sh (exit $rc)" >&2
        exit "$rc"
    fi
done
for s in "${skipped[@]}"; do
    echo "test: SKIPPED, not passed: $s"
done
