#!/usr/bin/env bash
# A short libFuzzer run of every fuzz target (docs/testing.md): builds them in build-san
# (scripts/san-build.sh: ASan + UBSan + libFuzzer), then runs each build-san/fuzz_* on a copy
# of its seed corpus fuzz/corpus_<name> in a temporary
# folder (the repository's corpus never grows here), and prints its executions. A crash, a
# leak, a timeout or running out of memory fails the script, naming the input that did it
# (kept in ZS_FUZZ_ARTIFACTS, default build-san/fuzz-artifacts): add it to the corpus once
# fixed. Exits 77, saying why, when clang or libFuzzer is missing. Every fuzz_* target the build
# makes runs, so a new fuzz/fuzz_<name>.c (with fuzz/corpus_<name>) needs no change here.
set -euo pipefail
cd "$(dirname "$0")/.."
S=$(pwd)
# The test command's run does the same work on every machine and every day: libFuzzer's seed 1
# and a fixed number of executions per target (10 to 30 s each here), so that what it tries
# does not hang on the machine's speed (it is not bit for bit the same: two runs reach a few
# different inputs). ZS_FUZZ_SECONDS=N fuzzes N seconds a target with
# a fresh seed instead, to look for new crashes (a crash found so is added to the corpus).
SECONDS_EACH=${ZS_FUZZ_SECONDS:-}
runs_of() { # executions of one target in the deterministic run
    case $1 in
    store) echo 1000000 ;;
    ckpt) echo 150000 ;;
    tokenizer) echo 20000 ;;
    *) echo 50000 ;;
    esac
}
ART=${ZS_FUZZ_ARTIFACTS:-$S/build-san/fuzz-artifacts}

rc=0
bash scripts/san-build.sh $(cd fuzz && ls fuzz_*.c | sed 's/\.c$//') || rc=$?
[ $rc = 0 ] || exit $rc

export ASAN_OPTIONS="detect_leaks=1:halt_on_error=1:abort_on_error=0"
export LSAN_OPTIONS="suppressions=$S/tests/lsan.supp:print_suppressions=0"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
T=$(mktemp -d /tmp/zshard-fuzz-XXXXXX)
trap 'rm -rf "$T"' EXIT
export TMPDIR=$T # the targets' scratch files, removed with it even after a crash
mkdir -p "$ART"

failed=()
summary=()
for exe in build-san/fuzz_*; do
    [ -x "$exe" ] && [ -f "$exe" ] || continue
    name=${exe#build-san/fuzz_}
    seeds=fuzz/corpus_$name
    corpus=$T/corpus_$name
    mkdir -p "$corpus"
    if [ -d "$seeds" ]; then
        cp "$seeds"/* "$corpus"/
    else
        echo "fuzz: note: $seeds does not exist; fuzz_$name starts from an empty corpus"
    fi
    log=$T/fuzz_$name.log
    if [ -n "$SECONDS_EACH" ]; then
        how=(-max_total_time="$SECONDS_EACH")
        what="${SECONDS_EACH}s"
    else
        how=(-seed=1 -runs="$(runs_of "$name")")
        what="$(runs_of "$name") runs from seed 1"
    fi
    echo "fuzz: fuzz_$name, $what, on a copy of $seeds"
    frc=0
    "$exe" "${how[@]}" -rss_limit_mb=2048 -timeout=10 -print_final_stats=1 \
        -artifact_prefix="$ART/fuzz_${name}-" "$corpus" > "$log" 2>&1 || frc=$?
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n1)
    done_line=$(grep -E '^#[0-9]+[[:space:]]+DONE' "$log" | tail -n1 || true)
    if [ $frc != 0 ]; then
        crash=$(sed -n 's/.*Test unit written to \(.*\)$/\1/p' "$log" | tail -n1)
        tail -n 60 "$log"
        echo "fuzz: FAIL: fuzz_$name exited $frc after ${execs:-?} executions; input: ${crash:-(none written)}"
        failed+=("fuzz_$name: ${crash:-exit $frc}")
    else
        echo "fuzz: fuzz_$name: ${execs:-?} executions ($what), no crash (${done_line:-no DONE line})"
    fi
    summary+=("fuzz_$name ${execs:-?} executions")
done
[ ${#summary[@]} -gt 0 ] || { echo "fuzz: FAIL: build-san has no fuzz_* target"; exit 1; }
echo "fuzz: summary: ${summary[*]/%/;}"
if [ ${#failed[@]} -gt 0 ]; then
    printf 'fuzz: FAIL: %s\n' "${failed[@]}"
    exit 1
fi
