#!/usr/bin/env bash
# Configure and build build-san, the sanitizer build that scripts/sanitize.sh and
# scripts/fuzz.sh share (docs/testing.md): clang, AddressSanitizer + UndefinedBehaviorSanitizer
# (ZS_SANITIZE) and libFuzzer's instrumentation with the fuzz_* targets (ZS_FUZZ), RelWithDebInfo,
# CUDA left out (the gpu suite has its own build). Incremental: a second run only rebuilds what
# changed. Arguments: the targets to build (default: all). Exits 77, saying why, when clang or
# its sanitizer and libFuzzer runtimes (Debian: clang, libclang-rt-14-dev) are missing.
set -euo pipefail
cd "$(dirname "$0")/.."
B=build-san

command -v clang >/dev/null && command -v clang++ >/dev/null ||
    { echo "san-build: SKIP: no clang/clang++ (Debian: apt-get install clang libclang-rt-14-dev)"; exit 77; }
probe=$(mktemp -d)
trap 'rm -rf "$probe"' EXIT
printf 'int LLVMFuzzerTestOneInput(const char *d, unsigned long n) { return 0; }\n' > "$probe/p.c"
if ! clang -fsanitize=address,undefined,fuzzer "$probe/p.c" -o "$probe/p" 2> "$probe/err"; then
    echo "san-build: SKIP: clang cannot link ASan+UBSan+libFuzzer programs (Debian: libclang-rt-14-dev): $(head -n1 "$probe/err")"
    exit 77
fi

CC=clang CXX=clang++ cmake -S . -B "$B" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DZS_SANITIZE=ON \
    -DZS_FUZZ=ON -DZS_WERROR=OFF -DZS_CUDA=OFF -DZS_NCCL=OFF -DZS_CUDA_EMU=OFF >/dev/null
if [ $# -gt 0 ]; then
    targets=()
    for t in "$@"; do targets+=(--target "$t"); done
    cmake --build "$B" -j"${ZS_BUILD_JOBS:-$(nproc)}" "${targets[@]}"
else
    cmake --build "$B" -j"${ZS_BUILD_JOBS:-$(nproc)}"
fi
