#!/usr/bin/env bash
# Tokenize throughput against Hugging Face tokenizers (bench/tokenize_bench.py) with the
# Python of build/pyvenv, where scripts/setup.sh installs `tokenizers`.
# usage: bench/tokenize_bench.sh [BUILD_DIR] [ROUNDS] [VOCAB]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
py="$build/pyvenv/bin/python"
[ -x "$py" ] || { echo "tokenize_bench: no $py (run scripts/setup.sh)" >&2; exit 77; }
exec "$py" bench/tokenize_bench.py "$build" "${2:-5}" "${3:-16000}"
