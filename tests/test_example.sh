#!/usr/bin/env bash
# The example model of examples/mlp_lm, written against <zshard.h> only: ddp/1/2/3 bitwise
# equal on 2 ranks, model-state bytes of every rank equal to the formula of
# docs/architecture.md "Memory accounting", save and resume (ZeRO-3, and into other stages and
# world sizes) continuing bitwise; and the docs' minimal example converging. Usage:
# test_example.sh BUILD_DIR
set -euo pipefail
B=$1
Z=$B/zshard
T=$(mktemp -d /tmp/zshard-example-XXXXXX)
trap 'rm -rf "$T"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
result() { grep -o 'result .*' "$1" | sed 's/^result //'; }
hash_of() { result "$1" | awk '{print $2}'; }

run() { # run OUT NRANKS ARGS...
    local out=$1 n=$2; shift 2
    "$Z" run -n "$n" -- "$B/mlp_lm" "$@" > "$out" 2>&1 || { cat "$out"; fail "mlp_lm $*"; }
}

for s in ddp 1 2 3; do run "$T/s$s" 2 --stage $s --steps 12; done
h=$(hash_of "$T/sddp")
[ -n "$h" ] || fail "no result line"
for s in 1 2 3; do
    [ "$(hash_of "$T/s$s")" = "$h" ] || fail "stage $s hash $(hash_of "$T/s$s") != ddp $h"
    cmp <(grep step "$T/s$s") <(grep step "$T/sddp") || fail "stage $s losses differ from ddp"
done
echo "ddp/1/2/3 on 2 ranks: param_hash $h (bitwise equal, losses equal)"
for s in ddp 1 2 3; do
    r=$(result "$T/s$s")
    want=$(echo "$r" | sed 's/.* = \([0-9]*\) rank0.*/\1/')
    for k in 0 1; do
        got=$(echo "$r" | sed "s/.* rank$k \([0-9]*\).*/\1/")
        [ "$got" = "$want" ] || fail "stage $s rank $k: model states $got bytes, formula $want"
    done
    echo "stage $s: $(echo "$r" | sed 's/^[0-9a-f]* //')"
done

# Gradient accumulation: the reduction order is the stage's (ddp = 1, 2 = 3), as for GPT-2.
run "$T/a1" 2 --stage 1 --steps 6 --accum 2
run "$T/addp" 2 --stage ddp --steps 6 --accum 2
run "$T/a2" 2 --stage 2 --steps 6 --accum 2
run "$T/a3" 2 --stage 3 --steps 6 --accum 2
[ "$(hash_of "$T/a1")" = "$(hash_of "$T/addp")" ] || fail "accum 2: stage 1 != ddp"
[ "$(hash_of "$T/a3")" = "$(hash_of "$T/a2")" ] || fail "accum 2: stage 3 != stage 2"

# Save at step 6 with ZeRO-3 and resume: bitwise the uninterrupted run, at stage 3 and at DDP.
run "$T/save" 2 --stage 3 --steps 6 --save "$T/ck"
grep -q '"arch":"custom"' "$T/ck/step_00000006/manifest.json" || fail "manifest: no custom arch"
grep -q '"name":"block.1.w"' "$T/ck/step_00000006/manifest.json" || fail "manifest: tensor names"
run "$T/res3" 2 --stage 3 --steps 12 --resume "$T/ck"
run "$T/resd" 2 --stage ddp --steps 12 --resume "$T/ck"
[ "$(hash_of "$T/res3")" = "$h" ] || fail "resume at stage 3: $(hash_of "$T/res3") != $h"
[ "$(hash_of "$T/resd")" = "$h" ] || fail "resume at ddp: $(hash_of "$T/resd") != $h"
"$Z" ckpt inspect "$T/ck" > "$T/inspect" 2>&1 || { cat "$T/inspect"; fail "zshard ckpt inspect"; }
grep -q "param_hash  $(hash_of "$T/save")" "$T/inspect" || { cat "$T/inspect"; fail "inspect: hash"; }
# A world of one reads the 2-rank checkpoint (its own reduction order then, so no hash check).
run "$T/res1" 1 --stage 2 --steps 8 --resume "$T/ck"
grep -q "step 7 loss" "$T/res1" || fail "1-rank resume did not continue at step 7"
echo "save at step 6 (ZeRO-3, 2 ranks) -> resume at stage 3 and ddp: bitwise equal; 1 rank loads"

"$Z" run -n 2 -- "$B/embed_minimal" > "$T/min" 2>&1 || { cat "$T/min"; fail "minimal"; }
awk '/ w / { w = $3; b = $5 } END { exit !(w > 2.99 && w < 3.01 && b > -1.01 && b < -0.99) }' \
    "$T/min" || { cat "$T/min"; fail "minimal example did not fit y = 3x - 1"; }
echo "minimal example: $(cat "$T/min")"
