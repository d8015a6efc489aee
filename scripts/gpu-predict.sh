#!/usr/bin/env bash
# The emulated GPU's predictions for scripts/gpu-check.sh, made here (they need no GPU) and
# carried to the GPU machine, so that its lease is not spent building the emulator:
#   bash scripts/gpu-predict.sh [DIR]     (default .pred, git-ignored; needs build/tests/zshard-emu)
# runs the two predictions gpu-check.sh would run there, with the same arguments, and writes
# DIR/predict.out (gpt2-124m, 16 x 1024, bf16), DIR/predict_small.out (gpt2-tiny, 4 x 64) and
# DIR/source (the commit, and "+ changes" when the tree differs from it). Then, on the
# device: ZS_GPU_PREDICTED=DIR bash scripts/gpu-check.sh --quick, carrying .gpu-deps and DIR.
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:-.pred}
emu=${ZS_EMU_BIN:-build/tests/zshard-emu}
[ -x "$emu" ] || {
    echo "gpu-predict: $emu not built (cmake --build build)" >&2
    exit 2
}
mkdir -p "$dir"
"$emu" bench step --device cuda --model gpt2-124m --batch 16 --seq 1024 --dtype bf16 >"$dir/predict.out" 2>&1
"$emu" bench step --device cuda --model gpt2-tiny --batch 4 --seq 64 >"$dir/predict_small.out" 2>&1
src=$(git rev-parse --short HEAD)
[ -z "$(git status --porcelain --untracked-files=no)" ] || src="$src + changes"
echo "$src" >"$dir/source"
grep -E '^\| (ms/step|MFU)' "$dir/predict.out"
echo "gpu-predict: $dir made from $src"
