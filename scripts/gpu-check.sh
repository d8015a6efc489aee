#!/usr/bin/env bash
# Everything a session with a real GPU runs, in one command of under 10 minutes (a 5-minute
# slot with --quick), ending in one report (docs/cuda.md, "On a real GPU"):
#   1. the machine: GPU, driver, nvcc, CPU, and which tools are there;
#   2. build for the GPU's architecture (default 90, the H100/H200) with the CUDA backend and
#      NCCL, tests against the real device (ZS_GPU_TESTS=REAL): the CLI and the gpu tests only;
#   3. ctest -L gpu: cuda_ops, cuda_flash_tc, gemm16_cuda, device_cuda, comm_nccl, train_cuda,
#      on the GPU (emu_profile, emu_cublaslt and emu_timeline, the emulator's own tests, are left
#      to CI);
#   4. (last, so that a short slot gets the numbers first) compute-sanitizer: memcheck and
#      racecheck on cuda_ops, memcheck on a short training job;
#   5. bench step --device cuda: gpt2-124m, batch 16 x 1024, bf16 (then fp32 with --tf32),
#      each against cuBLAS on the same shapes in the same run (the ceiling);
#   6. Nsight Compute (ncu): the measured time of every kernel of one bf16 training step, and
#      the attention kernels' occupancy and warp stalls;
#   7. the same step in PyTorch (bench/torch_step.py), when python3 imports torch with CUDA.
# A tool that is missing or refuses the device is reported and the check goes on; every step
# has a time limit, and a step that no longer fits the budget is skipped, saying so.
# The GPU machine reaches no registry: run scripts/gpu-deps.sh here first and carry .gpu-deps;
# what the machine lacks is unpacked from it into a private prefix, never over /.
#   device run:  bash scripts/gpu-check.sh [--quick]     (carry: .gpu-deps; report under $OUT)
#   --dry-run:   machine, dependencies and build only, then stop where a GPU is needed (what
#                tests/gpu_dryrun.sh runs in a bare root); without a visible GPU the check
#                stops there too, and fails.
# ZS_GPU_DEPS_FORCE=1 uses the carried packages even where the system has its own.
# ZS_GPU_PREDICTED=DIR takes the emulated GPU's predictions (predict.out, predict_small.out of
# the same commit, made here: they need no GPU) from DIR instead of building zshard-emu there,
# which saves the lease the emulator's build; scripts/gpu-predict.sh DIR makes them.
set -uo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
quick=0
dry=0
for a in "$@"; do
    case "$a" in
    --quick) quick=1 ;;
    --dry-run) dry=1 ;;
    -h | --help)
        sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//'
        exit 0
        ;;
    *)
        echo "gpu-check: unknown option '$a' (--quick, --dry-run)" >&2
        exit 2
        ;;
    esac
done
out=${OUT:-$root/out/gpu-check}
build=${ZS_GPU_BUILD:-$root/build-gpu}
arch=${ZS_CUDA_ARCH:-90}
jobs=$(nproc)
# seconds, all steps; a dry run is on a CPU machine (tests/gpu_dryrun.sh, 2 cores, maybe busy),
# where the GPU machine's budget and step limits mean nothing: it takes what it needs
budget=${ZS_GPU_BUDGET:-$([ "$dry" = 1 ] && echo 2000 || { [ "$quick" = 1 ] && echo 285 || echo 570; })}
t_start=$(date +%s)
mkdir -p "$out"
report=$out/report.md
log=$out/log.txt
: >"$report"
: >"$log"

say() { echo "$*" | tee -a "$report"; }
left() { echo $((budget - ($(date +%s) - t_start))); }
# step NAME SECONDS CMD...: runs CMD under a time limit (cut to what the budget has left), its
# output into the log (and the report's tail on failure); returns CMD's status, 124 when
# skipped for lack of time.
step() {
    local name=$1 limit=$2 rc t0 t1 rest
    shift 2
    rest=$(left)
    if [ "$rest" -lt 15 ]; then
        say "- $name: skipped, the ${budget} s budget is spent"
        return 124
    fi
    [ "$limit" -gt "$rest" ] || [ "$dry" = 1 ] && limit=$rest
    echo "== $name: $*" >>"$log"
    t0=$(date +%s)
    timeout --kill-after=10 "$limit" "$@" >"$out/$name.out" 2>&1
    rc=$?
    t1=$(date +%s)
    cat "$out/$name.out" >>"$log"
    if [ "$rc" = 124 ] || [ "$rc" = 137 ]; then
        say "- $name: cut at its ${limit} s limit"
    else
        say "- $name: exit $rc in $((t1 - t0)) s"
    fi
    if [ "$rc" != 0 ]; then
        { echo '```'; tail -n 40 "$out/$name.out"; echo '```'; } >>"$report"
    fi
    return "$rc"
}
# The CUDA toolkit's own tools, from PATH or beside nvcc.
tool() {
    local t
    t=$(command -v "$1" 2>/dev/null) && { echo "$t"; return 0; }
    local nv
    nv=$(command -v nvcc 2>/dev/null) || return 1
    for t in "$(dirname "$nv")/$1" "$(dirname "$nv")/../compute-sanitizer/$1" \
        "$(dirname "$nv")"/../../nsight-compute*/"$1"; do
        [ -x "$t" ] && { echo "$t"; return 0; }
    done
    return 1
}

say "# zshard gpu-check, $(date -u '+%Y-%m-%d %H:%M UTC')$([ "$quick" = 1 ] && echo ' (--quick)')$([ "$dry" = 1 ] && echo ' (--dry-run)')"
say ""
say "## Machine"
say '```'
gpu_ok=0
{
    if ! command -v nvidia-smi >/dev/null; then
        echo "nvidia-smi: not found"
    elif smi=$(nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv 2>&1); then
        echo "$smi"
    else
        echo "nvidia-smi: not available ($(echo "$smi" | head -n 1))"
    fi
    nvcc --version 2>&1 | tail -n 2 || echo "nvcc: not on PATH"
    cmake --version 2>&1 | head -n 1
    echo "C compiler: $(cc --version 2>&1 | head -n 1)"
    lscpu 2>/dev/null | grep -E '^(Model name|CPU\(s\))' || true
    for t in ninja python3 compute-sanitizer ncu; do
        p=$(tool "$t") && echo "$t: $p" || echo "$t: not found"
    done
    python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, "available", torch.cuda.is_available())' 2>/dev/null ||
        echo "torch: not importable"
    # The device's copy may carry a .git of another commit: the predictions say which commit
    # they (and the tree they came with) were made from.
    if [ -n "${ZS_GPU_PREDICTED:-}" ] && [ -f "$ZS_GPU_PREDICTED/source" ]; then
        echo "source: $(cat "$ZS_GPU_PREDICTED/source") (scripts/gpu-predict.sh)"
    else
        git -C "$root" rev-parse --short HEAD 2>/dev/null | sed 's/^/source: /' || echo "source: working tree copy"
    fi
} >"$out/machine.txt" 2>&1
nvidia-smi -L 2>/dev/null | grep -q GPU && gpu_ok=1
tee -a "$report" <"$out/machine.txt"
say '```'

# ---- dependencies: the system's, else the carried .gpu-deps unpacked into a prefix ---------
# A .deb is an ar archive of control and data tarballs; without dpkg-deb (a GPU image that is
# not Debian's) Python unpacks it.
unpack_deb() {
    if command -v dpkg-deb >/dev/null; then
        dpkg-deb -x "$1" "$2"
    else
        python3 - "$1" "$2" <<'EOF'
import io, sys, tarfile
data = open(sys.argv[1], "rb").read()
assert data[:8] == b"!<arch>\n", "not a .deb"
pos = 8
while pos < len(data):
    name, size = data[pos:pos + 16].decode().strip().rstrip("/"), int(data[pos + 48:pos + 58])
    body = data[pos + 60:pos + 60 + size]
    if name.startswith("data.tar"):
        tarfile.open(fileobj=io.BytesIO(body)).extractall(sys.argv[2])
    pos += 60 + size + (size & 1)
EOF
    fi
}
cmake_extra=()
deps=${ZS_GPU_DEPS_PREFIX:-/tmp/zs-gpu-deps}
have_cblas() { printf '#include <cblas.h>\n' | cc -E -x c - -I/usr/include/x86_64-linux-gnu/openblas-openmp -I/usr/include/openblas >/dev/null 2>&1; }
have_pc() { command -v pkg-config >/dev/null && pkg-config --exists "$1"; }
missing=()
have_cblas || missing+=(OpenBLAS)
have_pc libzstd || missing+=(zstd)
have_pc yaml-0.1 || missing+=(libyaml)
have_pc libcrypto || missing+=(libcrypto)
command -v pkg-config >/dev/null || missing+=(pkg-config)
if [ -n "${ZS_GPU_DEPS_FORCE:-}" ] || [ ${#missing[@]} -gt 0 ]; then
    if ls .gpu-deps/*.deb >/dev/null 2>&1; then
        rm -rf "$deps" && mkdir -p "$deps"
        for f in .gpu-deps/*.deb; do unpack_deb "$f" "$deps"; done
        lib=$deps/usr/lib/x86_64-linux-gnu
        # The packages' .pc files name /usr: rewritten to the prefix, in a folder searched first.
        mkdir -p "$deps/pc"
        for pc in "$lib"/pkgconfig/*.pc "$deps"/usr/share/pkgconfig/*.pc; do
            [ -f "$pc" ] || continue
            sed -e "s|^prefix=.*|prefix=$deps/usr|" -e "s|^libdir=.*|libdir=$lib|" \
                -e "s|^includedir=/usr|includedir=$deps/usr|" "$pc" >"$deps/pc/$(basename "$pc")"
        done
        export PKG_CONFIG_PATH=$deps/pc${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}
        export LD_LIBRARY_PATH=$lib/openblas-openmp:$lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
        export LIBRARY_PATH=$lib/openblas-openmp:$lib${LIBRARY_PATH:+:$LIBRARY_PATH}
        # Debian's multiarch headers (OpenSSL's opensslconf.h) sit beside the prefix's include/.
        export CPATH=$deps/usr/include/x86_64-linux-gnu${CPATH:+:$CPATH}
        cmake_extra+=("-DZS_CBLAS_INCLUDE_DIR=$deps/usr/include/x86_64-linux-gnu/openblas-openmp"
                      "-DCMAKE_LIBRARY_PATH=$lib/openblas-openmp;$lib"
                      "-DCMAKE_INCLUDE_PATH=$deps/usr/include")
        command -v pkg-config >/dev/null || cmake_extra+=("-DPKG_CONFIG_EXECUTABLE=$deps/usr/bin/pkgconf")
        say "- dependencies: ${missing[*]:-none} missing here; unpacked $(ls .gpu-deps/*.deb | wc -l) carried packages into $deps"
    else
        say "- dependencies: ${missing[*]} missing and no .gpu-deps carried (run scripts/gpu-deps.sh first)"
    fi
else
    say "- dependencies: the system's (OpenBLAS, zstd, libyaml, pkg-config all present)"
fi
# NCCL: the toolkit's or the system's, else the one PyTorch's wheels bring (nvidia-nccl-cu*).
nvcc_dir=$(dirname "$(command -v nvcc 2>/dev/null || echo /usr/local/cuda/bin/nvcc)")
have_nccl=0
for f in /usr/include/nccl.h /usr/local/cuda/include/nccl.h "$nvcc_dir/../include/nccl.h" \
    ${NCCL_HOME:+"$NCCL_HOME/include/nccl.h"}; do
    [ -f "$f" ] && have_nccl=1
done
# The toolkit's libraries (cudart, cuBLAS) where the loader may not look: a toolkit unpacked
# without an ld.so.conf entry.
for d in "$nvcc_dir/../lib64" "$nvcc_dir/../lib" "$nvcc_dir/../targets/x86_64-linux/lib"; do
    [ -d "$d" ] && export LD_LIBRARY_PATH=$(cd "$d" && pwd)${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
done
if [ "$have_nccl" = 0 ]; then
    nccl=$(python3 -c 'import nvidia, os, sys
for p in nvidia.__path__:
    for d, _, fs in os.walk(p):
        if "nccl.h" in fs: print(os.path.dirname(d)); sys.exit()' 2>/dev/null || true)
    if [ -n "$nccl" ]; then
        export NCCL_HOME=$nccl
        export LD_LIBRARY_PATH=$nccl/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
        say "- NCCL: PyTorch's, $nccl"
    else
        say "- NCCL: not in the toolkit and no PyTorch wheel of it: configure will say so"
    fi
fi

# ---- build: the CLI and the gpu tests --------------------------------------------------------
gen=()
command -v ninja >/dev/null && gen=(-G Ninja)
[ -f "$build/CMakeCache.txt" ] && gen=()
step configure 180 cmake -S . -B "$build" "${gen[@]}" -DCMAKE_BUILD_TYPE=Release \
    -DZS_CUDA=ON -DZS_NCCL=ON -DZS_GPU_TESTS=REAL -DZS_CUDA_EMU=ON -DZS_MPI=OFF \
    -DCMAKE_CUDA_ARCHITECTURES="$arch" "${cmake_extra[@]}" || { say "configure failed"; exit 1; }
# zshard-emu: the emulated GPU's CLI, for the predicted per-kernel table beside ncu's.
targets=(zshard test_cuda_ops test_cuda_ops_attn test_cuda_ops_state test_cuda_flash_tc test_gemm16
         test_device_cuda test_comm_nccl comm_worker_gpu test_train_cuda)
predicted=${ZS_GPU_PREDICTED:-}
if [ -n "$predicted" ] && [ -f "$predicted/predict.out" ] && [ -f "$predicted/predict_small.out" ]; then
    cp "$predicted/predict.out" "$predicted/predict_small.out" "$out/"
    say "- predictions: carried from $predicted (zshard-emu not built here)"
else
    predicted=
    targets+=(zshard-emu)
fi
# predict NAME LIMIT ARGS...: the emulated GPU's table, made here or carried.
predict() {
    local name=$1 lim=$2
    shift 2
    if [ -n "$predicted" ]; then
        say "- $name: carried"
        return 0
    fi
    step "$name" "$lim" "$build/tests/zshard-emu" "$@"
}
step build 420 cmake --build "$build" -j"$jobs" --target "${targets[@]}" || { say "build failed"; exit 1; }
# The binaries load with what is here (cudart, cuBLAS, NCCL, the carried libraries).
step loads 30 "$build/zshard" --version || { say "the built zshard does not start"; exit 1; }

# The emulated GPU runs here too (its prediction of a small step: no GPU needed).
predict predict_small 60 bench step --device cuda --model gpt2-tiny --batch 4 --seq 64 && grep -E '^\| ms/step' "$out/predict_small.out" |
    sed 's/^/    gpt2-tiny, 4 x 64, predicted /' >>"$report"
if [ "$dry" = 1 ] || [ "$gpu_ok" = 0 ]; then
    say ""
    if [ "$dry" = 1 ]; then
        say "stopped where a GPU is needed (--dry-run): the CUDA backend and the gpu tests built for sm_$arch"
        exit 0
    fi
    say "stopped where a GPU is needed: nvidia-smi lists no GPU here"
    exit 3
fi

# ---- tests on the GPU -------------------------------------------------------------------------
quick_env=()
[ "$quick" = 1 ] && quick_env=(env ZS_TEST_QUICK=1)
step ctest_gpu $([ "$quick" = 1 ] && echo 120 || echo 240) "${quick_env[@]}" \
    ctest --test-dir "$build" -L gpu -E '^emu_(profile|cublaslt|timeline)$' --output-on-failure --timeout 230
grep -E '^ *[0-9]+/[0-9]+ Test|tests passed|Skipped|not run:' "$out/ctest_gpu.out" |
    sed 's/^/    /' >>"$report"

# ---- step throughput: zshard, its cuBLAS ceiling, PyTorch ----------------------------------
say ""
say "## bench step, gpt2-124m, batch 16 x seq 1024"
modes=("bf16")
[ "$quick" = 0 ] && modes+=("fp32 --tf32")
for mode in "${modes[@]}"; do
    set -- $mode
    tag=bench_${1}${2:+_tf32}
    if step "$tag" 150 "$build/zshard" bench step --device cuda --model gpt2-124m --batch 16 \
        --seq 1024 --steps $([ "$quick" = 1 ] && echo 3 || echo 10) --dtype "$@"; then
        grep -E '^\||device' "$out/$tag.out" >>"$report"
    fi
done

# ---- per-kernel times: predicted by the emulator's H100 model, measured by Nsight Compute -------
# The emulated GPU's prediction of the same step (docs/cuda.md, "The profiler"), built here from
# the same sources; then ncu's measured time of every kernel of one step (and of the cuBLAS
# ceiling's GEMMs, 6 runs of the step's shapes, which is why the GEMM row divides by 7), side
# by side: the numbers that calibrate the model.
say ""
say "## per kernel: predicted (emulated GPU, H100 model) and measured (ncu), one bf16 step of gpt2-124m at 16 x 1024"
if predict predict $([ "$quick" = 1 ] && echo 90 || echo 150) bench step --device cuda --model gpt2-124m --batch 16 --seq 1024 --dtype bf16; then
    grep -E '^\| (ms/step|MFU)' "$out/predict.out" | sed 's/^/    predicted /' >>"$report"
fi
if ncu=$(tool ncu); then
    if step ncu_step $([ "$quick" = 1 ] && echo 60 || echo 120) "$ncu" --csv \
        --metrics gpu__time_duration.sum --print-units base \
        "$build/zshard" bench step --device cuda --model gpt2-124m --batch 16 --seq 1024 \
        --steps 1 --warmup-steps 0 --dtype bf16; then
        python3 - "$out/ncu_step.out" "$out/predict.out" >>"$report" <<'EOF' || say "- ncu: output not understood"
import csv, sys, collections
rows = [r for r in csv.reader(open(sys.argv[1])) if len(r) > 10]
head = rows[0]; rows = rows[1:]
k, m, v = head.index("Kernel Name"), head.index("Metric Name"), head.index("Metric Value")
rows = [r for r in rows if r[m] == "gpu__time_duration.sum"]
names = [r[k].split("(")[0].split("<")[0].split()[-1] for r in rows]
# The step's own launches: from its embedding to its last optimizer launch (before: the
# initialisation; after: the cuBLAS ceiling's GEMMs, on bf16 operands in a bf16 step).
first = next((i for i, n in enumerate(names) if n.startswith("embedding_fwd")), 0)
last = max((i for i, n in enumerate(names) if n.startswith("adamw")), default=len(rows) - 1)
meas = collections.defaultdict(float)
for r, n in list(zip(rows, names))[first:last + 1]:
    meas[n] += float(r[v].replace(",", "")) / 1e6
pred = collections.defaultdict(float)
try:
    for line in open(sys.argv[2]):
        c = [x.strip() for x in line.split("|")]
        if len(c) > 4 and c[1] and c[1][0] != "*" and c[1] != "kernel or call":
            try:
                pred["cuBLAS GEMMs" if c[1].startswith("cuBLAS") else c[1]] += float(c[3])
            except ValueError:
                pass
except OSError:
    pass
out = collections.defaultdict(float)
for name, ms in meas.items():
    out[name if name in pred else "cuBLAS GEMMs" if any(t in name.lower() for t in
        ("gemm", "cutlass", "xmma", "sm90", "cublas", "nvjet")) else name] += ms
print("| kernel | predicted ms | measured ms | measured / predicted |\n|---|---|---|---|")
for name in sorted(set(out) | set(pred), key=lambda n: -max(out.get(n, 0), pred.get(n, 0))):
    p, q = pred.get(name), out.get(name)
    ratio = f"{q / p:.2f}" if p and q else "-"
    print(f"| {name} | {p if p is not None else '-'} | {f'{q:.3f}' if q is not None else '-'} | {ratio} |")
print(f"| all | {sum(pred.values()):.3f} | {sum(out.values()):.3f} | |")
EOF
    else
        grep -Ei 'ERR_NVGPUCTRPERM|permission|not supported' "$out/ncu_step.out" | head -n 3 |
            sed 's/^/    /' >>"$report"
    fi
    # Why the slowest hand-written kernels take what they take: ncu's speed-of-light, occupancy
    # and warp-stall sections for the first launch of each attention kernel (ncu_fa_tc_*.out),
    # with its shared-memory load wavefronts and ldmatrix instructions: the emulator prices an
    # ldmatrix.x4, transposing or not, at four wavefronts (docs/cuda.md, "The profiler").
    for kern in fa_tc_fwd fa_tc_bwd_q fa_tc_bwd_dk fa_tc_bwd_dv; do
        step "ncu_$kern" 40 "$ncu" --section SpeedOfLight --section Occupancy \
            --section WarpStateStats --section LaunchStats --section MemoryWorkloadAnalysis \
            --metrics l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum,smsp__inst_executed_op_ldsm.sum \
            -k "regex:${kern}_kernel" --launch-count 1 \
            "$build/zshard" bench step --device cuda --model gpt2-124m --batch 16 --seq 1024 \
            --steps 1 --warmup-steps 0 --dtype bf16 &&
            grep -E '^  [a-z_]+_kernel|Duration|Achieved Occupancy|Registers Per|Compute \(SM\) Throughput|Memory Throughput|Warp Cycles Per Issued|Stall|stall|wavefronts_mem_shared_op_ld|op_ldsm' \
                "$out/ncu_$kern.out" | head -n 24 | sed 's/^/    /' >>"$report"
    done
else
    say "- ncu: not found: no measured per-kernel times (the predicted table is in predict.out)"
fi

if python3 -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
    say ""
    say "## PyTorch, the same step"
    for dt in bf16 $([ "$quick" = 0 ] && echo tf32); do
        step "torch_$dt" 120 python3 bench/torch_step.py --batch 16 --seq 1024 --steps 10 \
            --dtype "$dt" && grep -E '^\|' "$out/torch_$dt.out" >>"$report"
    done
else
    say "- PyTorch with CUDA not importable: no side-by-side"
fi
# ---- compute-sanitizer: races and bad accesses on the real device -------------------------------
corpus=$out/corpus.txt
for f in README.md docs/*.md; do cat "$f"; done >"$corpus"
train_short=("$build/zshard" train --data "$corpus" --model gpt2-tiny --device cuda --steps 3
             --batch 4 --seq 64 --stage 3 --dtype bf16)
if cs=$(tool compute-sanitizer); then
    say ""
    say "## compute-sanitizer ($cs)"
    cs_run() { # NAME TOOL LIMIT CMD...
        local name=$1 t=$2 lim=$3
        shift 3
        # ZS_GPU=real as ctest gives the gpu tests (tests/CMakeLists.txt): the real GPU's checks
        step "$name" "$lim" env ZS_TEST_QUICK=1 ZS_GPU=real "$cs" --tool "$t" --error-exitcode 9 \
            --print-limit 20 "$@"
        grep -E 'ERROR SUMMARY|RACECHECK SUMMARY|Error:|refus|not supported' "$out/$name.out" |
            head -n 5 | sed 's/^/    /' >>"$report"
    }
    cs_run memcheck_cuda_ops memcheck 90 "$build/tests/test_cuda_ops"
    # the tensor-core attention's shared tiles, the kernels a race would most likely hide in
    cs_run racecheck_flash_tc racecheck 120 "$build/tests/test_cuda_flash_tc"
    if [ "$quick" = 0 ]; then
        cs_run racecheck_cuda_ops racecheck 120 "$build/tests/test_cuda_ops"
        cs_run memcheck_cuda_ops_attn memcheck 90 "$build/tests/test_cuda_ops_attn"
        cs_run memcheck_cuda_ops_state memcheck 90 "$build/tests/test_cuda_ops_state"
        cs_run memcheck_train memcheck 60 "${train_short[@]}"
    fi
else
    say "- compute-sanitizer: not found (the toolkit's compute-sanitizer/ folder): racecheck and memcheck not run"
fi

say ""
say "done in $(($(date +%s) - t_start)) s. Full log: log.txt beside this report."
