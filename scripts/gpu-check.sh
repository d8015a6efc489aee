#!/usr/bin/env bash
# Everything a session with a real GPU runs, in one command of under 10 minutes, ending in one
# report (docs/cuda.md, "On a real GPU"):
#   1. the machine: GPU, driver, nvcc, CPU;
#   2. build for the GPU's architecture (default 90, the H100/H200) with the CUDA backend and
#      NCCL, tests against the real device (ZS_GPU_TESTS=REAL), no emulator;
#   3. ctest -L gpu: cuda_ops, comm_nccl, train_cuda and the rest of the gpu label, on the GPU;
#   4. bench step --device cuda: gpt2-124m, batch 16 x 1024, bf16, then fp32 with --tf32, each
#      against cuBLAS on the same shapes in the same run (the ceiling);
#   5. the same step in PyTorch (bench/torch_step.py), when python3 imports torch with CUDA.
# The GPU machine reaches no registry: run scripts/gpu-deps.sh here first and carry .gpu-deps;
# packages the machine lacks are unpacked from it into a private prefix, never over /.
#   device run:  bash scripts/gpu-check.sh      (carry: .gpu-deps; report under $OUT)
# Without a GPU it still builds and runs step 3, whose tests then skip saying why.
# ZS_GPU_DEPS_FORCE=1 uses the carried packages even where the system has its own (a dry run).
set -uo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
out=${OUT:-$root/out/gpu-check}
build=${ZS_GPU_BUILD:-$root/build-gpu}
arch=${ZS_CUDA_ARCH:-90}
jobs=$(nproc)
mkdir -p "$out"
report=$out/report.md
log=$out/log.txt
: >"$report"
: >"$log"

say() { echo "$*" | tee -a "$report"; }
# step NAME SECONDS CMD...: runs CMD under a time limit, its output into the log (and the
# report's tail on failure); returns CMD's status.
step() {
    local name=$1 limit=$2 rc t0 t1
    shift 2
    echo "== $name: $*" >>"$log"
    t0=$(date +%s)
    timeout --kill-after=10 "$limit" "$@" >"$out/$name.out" 2>&1
    rc=$?
    t1=$(date +%s)
    cat "$out/$name.out" >>"$log"
    say "- $name: exit $rc in $((t1 - t0)) s"
    if [ "$rc" != 0 ]; then
        { echo '```'; tail -n 40 "$out/$name.out"; echo '```'; } >>"$report"
    fi
    return "$rc"
}

say "# zshard gpu-check, $(date -u '+%Y-%m-%d %H:%M UTC')"
say ""
say "## Machine"
say '```'
{
    nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv 2>&1 ||
        echo "nvidia-smi: not available"
    nvcc --version 2>&1 | tail -n 2 || echo "nvcc: not on PATH"
    cmake --version 2>&1 | head -n 1
    lscpu 2>/dev/null | grep -E '^(Model name|CPU\(s\))' || true
    git -C "$root" rev-parse --short HEAD 2>/dev/null | sed 's/^/source: /' || echo "source: working tree copy"
} 2>&1 | tee -a "$report"
say '```'

# ---- dependencies: the system's, else the carried .gpu-deps unpacked into a prefix ---------
cmake_extra=()
deps=/tmp/zs-gpu-deps
have_cblas() { printf '#include <cblas.h>\n' | cc -E -x c - -I/usr/include/x86_64-linux-gnu/openblas-openmp -I/usr/include/openblas >/dev/null 2>&1; }
have_zstd() { command -v pkg-config >/dev/null && pkg-config --exists libzstd; }
if [ -n "${ZS_GPU_DEPS_FORCE:-}" ] || ! have_cblas || ! have_zstd; then
    if ls .gpu-deps/*.deb >/dev/null 2>&1; then
        rm -rf "$deps" && mkdir -p "$deps"
        for f in .gpu-deps/*.deb; do dpkg-deb -x "$f" "$deps"; done
        lib=$deps/usr/lib/x86_64-linux-gnu
        mkdir -p "$deps/pc"
        sed -e "s|^prefix=.*|prefix=$deps/usr|" -e "s|^libdir=.*|libdir=$lib|" \
            "$lib/pkgconfig/libzstd.pc" >"$deps/pc/libzstd.pc"
        export PKG_CONFIG_PATH=$deps/pc${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}
        export LD_LIBRARY_PATH=$lib/openblas-openmp:$lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
        export LIBRARY_PATH=$lib/openblas-openmp:$lib${LIBRARY_PATH:+:$LIBRARY_PATH}
        cmake_extra+=("-DZS_CBLAS_INCLUDE_DIR=$deps/usr/include/x86_64-linux-gnu/openblas-openmp"
                      "-DCMAKE_LIBRARY_PATH=$lib/openblas-openmp;$lib"
                      "-DCMAKE_INCLUDE_PATH=$deps/usr/include")
        command -v pkg-config >/dev/null || cmake_extra+=("-DPKG_CONFIG_EXECUTABLE=$deps/usr/bin/pkgconf")
        say "- dependencies: unpacked $(ls .gpu-deps/*.deb | wc -l) carried packages into $deps"
    else
        say "- dependencies: OpenBLAS or zstd headers missing and no .gpu-deps carried (run scripts/gpu-deps.sh first)"
    fi
fi
# NCCL: the toolkit's or the system's, else the one PyTorch's wheels bring (nvidia-nccl-cu13).
if ! ls /usr/include/nccl.h /usr/local/cuda/include/nccl.h >/dev/null 2>&1 && [ -z "${NCCL_HOME:-}" ]; then
    nccl=$(python3 -c 'import nvidia.nccl as n; print(list(n.__path__)[0])' 2>/dev/null || true)
    if [ -n "$nccl" ] && [ -f "$nccl/include/nccl.h" ]; then
        export NCCL_HOME=$nccl
        export LD_LIBRARY_PATH=$nccl/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
        say "- NCCL: PyTorch's, $nccl"
    fi
fi

# ---- build -----------------------------------------------------------------------------------
gen=()
command -v ninja >/dev/null && gen=(-G Ninja)
[ -f "$build/CMakeCache.txt" ] && gen=()
step configure 120 cmake -S . -B "$build" "${gen[@]}" -DCMAKE_BUILD_TYPE=Release \
    -DZS_CUDA=ON -DZS_NCCL=ON -DZS_GPU_TESTS=REAL -DZS_CUDA_EMU=OFF -DZS_MPI=OFF \
    -DCMAKE_CUDA_ARCHITECTURES="$arch" "${cmake_extra[@]}" || { say "configure failed"; exit 1; }
step build 300 cmake --build "$build" -j"$jobs" || { say "build failed"; exit 1; }

# ---- tests on the GPU -------------------------------------------------------------------------
step ctest_gpu 300 ctest --test-dir "$build" -L gpu --output-on-failure --timeout 280
grep -E '^ *[0-9]+/[0-9]+ Test|tests passed|Skipped|not run:' "$out/ctest_gpu.out" |
    sed 's/^/    /' >>"$report"

# ---- step throughput: zshard, its cuBLAS ceiling, PyTorch ----------------------------------
say ""
say "## bench step, gpt2-124m, batch 16 x seq 1024"
for mode in "bf16" "fp32 --tf32"; do
    set -- $mode
    tag=bench_${1}${2:+_tf32}
    if step "$tag" 150 "$build/zshard" bench step --device cuda --model gpt2-124m --batch 16 \
        --seq 1024 --steps 10 --dtype "$@"; then
        grep -E '^\||device' "$out/$tag.out" >>"$report"
    fi
done
if python3 -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
    for dt in bf16 tf32; do
        step "torch_$dt" 120 python3 bench/torch_step.py --batch 16 --seq 1024 --steps 10 \
            --dtype "$dt" && grep -E '^\|' "$out/torch_$dt.out" >>"$report"
    done
else
    say "- PyTorch with CUDA not importable: no side-by-side"
fi
say ""
say "Full log: log.txt beside this report."
