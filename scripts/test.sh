#!/usr/bin/env bash
# Set everything up (packages, build) and run the whole test suite through ctest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
cd build
# Tests run one at a time: multi-rank tests already use both cores, and running them side by
# side would only turn their timeouts into noise.
ctest --output-on-failure --timeout 600 "$@"
