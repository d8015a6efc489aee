#!/usr/bin/env bash
# The CPU test suite under AddressSanitizer + UndefinedBehaviorSanitizer (docs/testing.md):
# builds build-san (scripts/san-build.sh, incremental) and runs its ctest without the gpu,
# mutant and setup labels (the CUDA backend and the emulated GPU are not in this build; the
# setup test builds a Debian root). A memory error, a leak in zshard's code or an undefined
# behaviour stops the process that has it, and its test fails. Tests that cannot run under a
# sanitizer skip (77) saying why. Exits 77 when clang is missing. Extra arguments go to ctest.
set -euo pipefail
cd "$(dirname "$0")/.."
S=$(pwd)

rc=0
bash scripts/san-build.sh || rc=$?
[ $rc = 0 ] || exit $rc

# Set here, inherited by every test and every process a test starts (zshard run's ranks,
# mpirun's, the launcher's restarts). Leak checking is on; tests/lsan.supp lists the leaks of
# third-party libraries (each with its reason), never zshard's own.
export LSAN_OPTIONS="suppressions=$S/tests/lsan.supp:print_suppressions=0"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
asan="detect_leaks=1:halt_on_error=1:check_initialization_order=1:strict_init_order=1"
# The tests whose ranks call MPI_Init: Open MPI's leaks come from plugins built without frame
# pointers and unloaded before LSan looks, so only a full unwind of each allocation
# (fast_unwind_on_malloc=0) reaches the Open MPI library a suppression names. It makes every
# malloc about 10 times dearer (the JSON parsers' tests), so only these run with it.
MPI_TESTS='^(comm_mpi|multihost)$'
LABELS='^(gpu|mutant|setup)$'
# Left out here: slurm. Its jobs run against Slurm's own clock (a --signal one minute before a
# time limit, requeues), and ASan's several times slower steps turn that into a long chain of
# requeues. Its C code (src/comm/env_slurm.c) runs under the sanitizers in comm_local, and the
# ranks it starts do what multihost's do, which runs here.
LEFT_OUT='^(comm_mpi|multihost|slurm)$'

start=$(date +%s)
cd build-san
rc=0
ASAN_OPTIONS=$asan ctest --output-on-failure --timeout 600 -LE "$LABELS" -E "$LEFT_OUT" "$@" ||
    rc=$?
ASAN_OPTIONS=$asan:fast_unwind_on_malloc=0 \
    ctest --output-on-failure --timeout 600 -LE "$LABELS" -R "$MPI_TESTS" "$@" || rc=$?
echo "sanitize: the CPU suite under ASan+UBSan took $(( $(date +%s) - start )) s"
exit $rc
