#!/usr/bin/env bash
# Every __global__ kernel in src/backend/cuda/*.cu was launched by the gpu suite: the emulated
# GPU writes the name of each kernel a process launches under ZS_EMU_COVERAGE_DIR
# (kernels-<pid>.txt), and this compares them with the kernels the sources define.
# Usage: emu_coverage.sh SOURCE_DIR COVERAGE_DIR
set -u
src=$1
cov=$2
defined=$(sed -n 's/.*__global__ void \(ZS_BOUNDS([^)]*) \)\{0,1\}\([A-Za-z0-9_]*\)(.*/\2/p' "$src"/src/backend/cuda/*.cu | sort -u)
[ -n "$defined" ] || { echo "no __global__ kernels found in $src/src/backend/cuda"; exit 1; }
launched=$(cat "$cov"/kernels-*.txt 2>/dev/null | sort -u)
[ -n "$launched" ] || { echo "no kernel launches recorded in $cov (did the gpu tests run?)"; exit 1; }
missing=$(comm -23 <(printf '%s\n' "$defined") <(printf '%s\n' "$launched"))
n_def=$(printf '%s\n' "$defined" | wc -l)
if [ -n "$missing" ]; then
    echo "kernels never launched by the gpu suite:"
    printf '  %s\n' $missing
    exit 1
fi
echo "all $n_def __global__ kernels of src/backend/cuda were launched by the gpu suite"
