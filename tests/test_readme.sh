#!/usr/bin/env bash
# README.md's snippets, run as written. Every ```sh and ```python block, numbered,
# runs in a scratch directory of its own that holds a small real corpus.txt (Debian's fortunes,
# else generated text) and build/zshard (this build's binary, so `./build/zshard` is it); python
# blocks run with BUILD_DIR/pyvenv's python, the package installed as scripts/setup.sh installs
# it, without ZSHARD_LIB. A command (a line, with its backslash continuations) that cannot run in
# a test is listed in NOT_RUN below by a substring, with the reason, and reported as "not run:
# <reason>"; every other command runs and must succeed. The test fails when a block fails, when
# a fenced block has a language that is neither run nor a known kind of output, and when a
# NOT_RUN entry matches nothing. Exits 77 (skipped) when python3 is missing and every sh block
# passed, and in the sanitizer build. Usage: test_readme.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
B=$(cd "$1" && pwd)
S=$(cd "$2" && pwd)
README=$S/README.md
if grep -q '^ZS_SANITIZE:BOOL=ON$' "$B/CMakeCache.txt"; then
    echo "SKIP: a sanitizer build (scripts/sanitize.sh): README's commands (a whole corpus's eval," \
         "the benchmarks) take over 15 minutes under ASan, and its python blocks would load an" \
         "instrumented libzshard.so; the normal build runs them, the CLI tests run here"
    exit 77
fi

# substring|reason. Keep it short: anything not here runs.
NOT_RUN=(
    "bash scripts/demo.sh|the README's first command itself (apt, a build, a 4-minute run): this suite runs after it"
    "bash scripts/test.sh|the README's second command itself: it runs this whole suite"
    "train --model gpt2-124m --data corpus.txt --nproc 4|100 steps of GPT-2 124M on 4 ranks: far over 2 minutes on 2 cores"
    "bench memory --model gpt2-124m|12 runs of GPT-2 124M (every stage at 1, 2 and 4 ranks): about 8 minutes on 2 cores"
    "cmake -S . -B build|configures the checkout: the build this test runs from"
    "cmake --build build|builds the checkout: the build this test runs from"
    "ctest --test-dir build|runs the whole suite, this test included"
    "WORLD_SIZE=2 MASTER_ADDR=10.77.0.1|one process on each of two machines: test_multihost.sh runs it between network namespaces"
    "--nnodes 2 --node-rank|one launcher on each of two machines: test_multihost.sh runs it between network namespaces"
)
OUTPUT_LANGS=" json text yaml "  # fenced blocks that show output or records, never commands

T=$(mktemp -d /tmp/zshard-readme-XXXXXX)
trap 'rm -rf "$T"' EXIT

# The corpus: Debian's fortunes as scripts/demo.sh reads them, else deterministic text.
if [ -d /usr/share/games/fortunes ]; then
    find /usr/share/games/fortunes -maxdepth 1 -type f ! -name '*.dat' -print0 | sort -z |
        xargs -0 cat > "$T/corpus.txt"
fi
if [ ! -s "$T/corpus.txt" ]; then
    awk 'BEGIN { split("the a shard rank gathers reduces every unit before after forward " \
                       "backward step gradient memory model of and in to is", w, " ");
                 x = 7; for (i = 0; i < 200000; i++) { x = (x * 1103515245 + 12345) % 2147483648;
                 printf "%s%s", w[1 + int(x / 65536) % 20], (i % 13 == 12) ? ".\n" : " " } }' \
        > "$T/corpus.txt"
fi

# The blocks: $T/blocks/N holds block N's text (its fence's indentation removed), and the
# index lines "N LINE LANG" (LANG "-" for a bare fence).
mkdir -p "$T/blocks"
awk -v dir="$T/blocks" '
    !on && match($0, /^ *```/) {
        on = 1; n++; ind = RLENGTH - 3; lang = substr($0, RLENGTH + 1); sub(/[ \t]+$/, "", lang)
        print n, NR, (lang == "" ? "-" : lang); printf "" > (dir "/" n); next
    }
    on && $0 ~ /^ *```[ \t]*$/ { on = 0; close(dir "/" n); next }
    on { print substr($0, 1 + ind) >> (dir "/" n) }
    END { if (on) { print "unterminated fence in README.md" > "/dev/stderr"; exit 1 } }
' "$README" > "$T/index"

declare -A used=()
fail=0
skipped_py=0
PY=$B/pyvenv/bin/python
have_py=1
command -v python3 >/dev/null || have_py=0
if [ $have_py = 1 ]; then
    [ -x "$PY" ] || { echo "FAIL: $B/pyvenv missing: run scripts/setup.sh" >&2; exit 1; }
    # As scripts/setup.sh installs it (offline), with this build's library bundled.
    ZSHARD_LIB=$B/libzshard.so ZSHARD_EXE=$B/zshard \
        "$PY" -m pip install -q --no-deps --no-build-isolation --force-reinstall "$S/python"
fi

# why := the NOT_RUN reason for a command, or empty; counts the entry as used (no subshell).
reason_for() {
    local e
    why=""
    for e in "${NOT_RUN[@]}"; do
        if [[ "$1" == *"${e%%|*}"* ]]; then
            used[${e%%|*}]=1
            why=${e#*|}
            return
        fi
    done
}

# A scratch directory as the README's reader has it: the checkout's build/zshard, its examples/
# (the tokenizer of the tokenize example) and a corpus.
scratch() {
    mkdir -p "$1/build"
    ln -s "$B/zshard" "$1/build/zshard"
    ln -s "$S/examples" "$1/examples"
    ln -s "$T/corpus.txt" "$1/corpus.txt"
}

run_in() { # DIR LOG COMMAND...: run with a clear end, ZSHARD_* unset (the package finds its own)
    local dir=$1 log=$2
    shift 2
    (cd "$dir" && env -u ZSHARD_LIB -u ZSHARD_EXE -u LD_LIBRARY_PATH timeout 600 "$@") \
        > "$log" 2>&1
}

while read -r n line lang; do
    where="README.md block $n (line $line, $lang)"
    text=$T/blocks/$n
    d=$T/run$n
    case "$lang" in
    sh)
        # Logical commands (backslash continuations joined) checked against NOT_RUN; the ones
        # that run are written out as they stand in the README.
        script=$d.sh
        : > "$script"
        ran=0
        cmd=""
        while IFS= read -r l || [ -n "$l" ]; do
            cmd+="$l"$'\n'
            [[ "$l" == *\\ ]] && continue
            reason_for "$cmd"
            if [ -n "$why" ]; then
                echo "$where: not run: $why: ${cmd%%$'\n'*}"
            else
                printf '%s' "$cmd" >> "$script"
                [[ "$cmd" =~ ^[[:space:]]*(#|$) ]] || ran=$((ran + 1))
            fi
            cmd=""
        done < "$text"
        [ $ran -gt 0 ] || continue
        scratch "$d"
        if run_in "$d" "$d.log" bash -eu -o pipefail "$script"; then
            echo "$where: ok ($ran command(s) ran)"
        else
            rc=$?
            echo "---- $where failed (exit $rc$([ $rc = 124 ] && echo ', timed out after 600 s')):" >&2
            cat "$script" >&2
            echo "---- its output (last 40 lines):" >&2
            tail -n 40 "$d.log" >&2
            fail=1
        fi
        ;;
    python)
        reason_for "$(cat "$text")"
        if [ -n "$why" ]; then
            echo "$where: not run: $why"
            continue
        fi
        if [ $have_py = 0 ]; then
            echo "$where: not run: python3 is missing"
            skipped_py=$((skipped_py + 1))
            continue
        fi
        scratch "$d"
        cp "$text" "$d/readme_block.py"
        if run_in "$d" "$d.log" "$PY" readme_block.py; then
            echo "$where: ok"
        else
            rc=$?
            echo "---- $where failed (exit $rc):" >&2
            cat "$text" >&2
            echo "---- its output (last 40 lines):" >&2
            tail -n 40 "$d.log" >&2
            fail=1
        fi
        ;;
    -) ;; # a bare fence: output shown as the reader sees it
    *)
        if [[ "$OUTPUT_LANGS" != *" $lang "* ]]; then
            echo "FAIL: $where: a \`\`\`$lang block is neither run nor a kind of output: make it" \
                "\`\`\`sh or \`\`\`python, or add its language to OUTPUT_LANGS in $0" >&2
            fail=1
        fi
        ;;
    esac
done < "$T/index"

for e in "${NOT_RUN[@]}"; do
    if [ -z "${used[${e%%|*}]+x}" ]; then
        echo "FAIL: NOT_RUN entry '${e%%|*}' matches no command of README.md: remove it" >&2
        fail=1
    fi
done
[ $fail = 0 ] || { echo "FAIL: README.md snippets" >&2; exit 1; }
[ $skipped_py = 0 ] || { echo "skipped: $skipped_py python block(s) not run (no python3)"; exit 77; }
echo "README.md: every sh and python block ran, apart from the commands listed as not run"
