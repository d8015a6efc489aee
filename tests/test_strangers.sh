#!/usr/bin/env bash
# Strangers on a job's ports (docs/comm.md, "The rendezvous store"). A 2-rank gloo
# job started by hand (RANK, WORLD_SIZE, MASTER_PORT on loopback) while tests/stranger.py:
#   - opens 100 empty connections to the store's port, sends it junk (random bytes, HTTP, a
#     wrong magic, oversize lengths, half a hello, requests without a hello, another job's
#     hello), and holds 2000 connections open while rank 1 joins, during rendezvous;
#   - keeps hitting the port during training;
# and the job ends with the param_hash of the same job undisturbed. Then:
#   - a second job on the same MASTER_PORT is refused, with both identities named on both
#     sides, and the first job still ends with the undisturbed param_hash;
#   - with ZS_JOB_SECRET, the job runs; a rank without the secret, or with another one, is
#     refused; a raw client that greets without the secret reads no key; a secret file that
#     others may read is refused;
#   - junk on gloo's own listening port (open while gloo connects its pairs) fails the job
#     with gloo's named error, within the timeout: the documented limit of libgloo.
# Usage: test_strangers.sh BUILD_DIR
set -uo pipefail
B=$(cd "$1" && pwd)
Z=$B/zshard
HERE=$(cd "$(dirname "$0")" && pwd)
STRANGER=(python3 "$HERE/stranger.py")

fail() {
    echo "FAIL: $*" >&2
    exit 1
}
skip() {
    echo "SKIP: $*"
    exit 77
}
[[ "$("$Z" --version)" == *" gloo"* ]] ||
    skip "this build has no gloo (install libgloo-dev; -DZS_GLOO=ON)"
command -v python3 > /dev/null || skip "no python3 for the stranger"
command -v ss > /dev/null || skip "no ss (iproute2) to find gloo's listening port"

T=$(mktemp -d /tmp/zshard-strangers-XXXXXX)
trap 'kill $(jobs -p) 2> /dev/null; rm -rf "$T"' EXIT
cd "$T" || fail "cd $T"
for i in $(seq 1 3000); do printf 'the king of %d. ' "$i"; done > c.txt
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
unset ZS_JOB_SECRET ZS_JOB_SECRET_FILE
ARGS=(train --data "$T/c.txt" --model gpt2-mini --batch 12 --seq 32 --sample-len 0 --val-every 0
      --comm gloo --comm-timeout 20 --stage 3 --steps 60)
hash_in() { grep -o 'param_hash [0-9a-f]*' "$1" | tail -n 1 | awk '{print $2}'; }
# A free port below the kernel's ephemeral range (32768 up), where no outgoing connection (the
# flood's own among them) can hold it.
port() {
    local p
    for _ in $(seq 1 50); do
        p=$(shuf -i 20000-32000 -n 1)
        [[ -z "$(ss -tanH "sport = :$p")" ]] && break
    done
    echo "$p"
}
# rank R of a 2-rank job on port P, output in OUT (exit status appended): rank P R OUT [ENV...]
rank() {
    local p=$1 r=$2 out=$3
    shift 3
    (env "$@" RANK="$r" WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT="$p" timeout 120 \
        "$Z" "${ARGS[@]}" > "$out" 2>&1; echo "exit $?" >> "$out")
}
# (grep reads everything, never -q after a pipe: with pipefail a writer cut off early fails it)
listening() { [[ "$(ss -ltnH "sport = :$1")" == *LISTEN* ]]; }
wait_listen() { # PORT OUT: until something listens there, or the rank writing OUT has exited
    # (60 s at most: a rank's start takes seconds on two busy cores)
    for _ in $(seq 1 600); do
        listening "$1" && return 0
        grep -q "^exit" "$2" 2> /dev/null && return 1
        sleep 0.1
    done
    return 1
}
ok_hash() { # OUT WHAT: exit 0, and rank 0 (the one that prints it) has the reference's hash
    grep -q "^exit 0" "$1" || { cat "$1"; fail "$2: the rank did not exit 0"; }
    [[ "$1" != *.0 || "$(hash_in "$1")" == "$REF" ]] ||
        { cat "$1"; fail "$2: param_hash $(hash_in "$1") != $REF"; }
}

# ---- the undisturbed job -------------------------------------------------------------------
p=$(port)
rank "$p" 1 ref.1 ZS_JOB_ID=ref &
rank "$p" 0 ref.0 ZS_JOB_ID=ref
wait
REF=$(hash_in ref.0)
[[ -n "$REF" ]] && grep -q "^exit 0" ref.0 || { cat ref.0 ref.1; fail "the undisturbed job"; }
echo "undisturbed 2-rank gloo job: param_hash $REF"

# ---- strangers during rendezvous and training ----------------------------------------------
p=$(port)
rank "$p" 0 s.0 ZS_JOB_ID=s ZS_LOG_LEVEL=debug &
wait_listen "$p" s.0 || { cat s.0; fail "rank 0's store never listened on $p"; }
"${STRANGER[@]}" --port "$p" --empty 100 --junk > stranger.1 || fail "stranger.py"
"${STRANGER[@]}" --port "$p" --flood 2000 --hold 5 --ready half > stranger.2 &
flood=$!
for _ in $(seq 1 300); do [[ -e half ]] && break; sleep 0.1; done
[[ -e half ]] || fail "the flood never got half way"
rank "$p" 1 s.1 ZS_JOB_ID=s &
r1=$!
# During training: the store has closed its port; keep knocking until rank 1 is done.
knocks=0
t0=$(date +%s)
while kill -0 "$r1" 2> /dev/null && (($(date +%s) - t0 < 60)); do
    "${STRANGER[@]}" --port "$p" --empty 10 --junk > /dev/null
    knocks=$((knocks + 1))
    sleep 0.1
done
wait
cat stranger.1 stranger.2
ok_hash s.0 "strangers: rank 0"
ok_hash s.1 "strangers: rank 1"
grep -q "rendezvous store :$p: turned away [0-9]* connections" s.0 ||
    { cat s.0; fail "strangers: rank 0's debug log does not count the connections it turned away"; }
echo "strangers (100 empty, junk, a 2000-connection flood; $knocks knocks during training):" \
    "param_hash $REF as undisturbed"
grep -o "turned away.*" s.0 | head -n 1

# ---- a second job on the same port ---------------------------------------------------------
p=$(port)
rank "$p" 0 a.0 ZS_JOB_ID=jobA &
wait_listen "$p" a.0 || { cat a.0; fail "job A's store never listened"; }
rank "$p" 1 b.1 ZS_JOB_ID=jobB
rank "$p" 0 b.0 ZS_JOB_ID=jobB
rank "$p" 1 a.1 ZS_JOB_ID=jobA
wait
grep -q "refused rank 1 of job 'ZS_JOB_ID=jobB': it serves job 'ZS_JOB_ID=jobA' (world 2)" b.1 ||
    { cat b.1; fail "job B's rank 1 does not name both jobs"; }
grep -q "^exit 0" b.1 && fail "job B's rank 1 exited 0"
grep -q "refused rank 1 of job 'ZS_JOB_ID=jobB' (world 2) .*this store serves job 'ZS_JOB_ID=jobA'" a.0 ||
    { cat a.0; fail "job A's rank 0 does not name both jobs"; }
grep -q "cannot listen on MASTER_PORT $p" b.0 || { cat b.0; fail "job B's rank 0: no port message"; }
ok_hash a.0 "job A beside job B: rank 0"
ok_hash a.1 "job A beside job B: rank 1"
echo "a second job on the same port: refused, both named; the first ends with $REF"
grep -o "refused rank 1 of job 'ZS_JOB_ID=jobB':.*" b.1

# ---- a shared secret -----------------------------------------------------------------------
p=$(port)
rank "$p" 0 k.0 ZS_JOB_ID=k ZS_JOB_SECRET=open-sesame &
wait_listen "$p" k.0 || { cat k.0; fail "the secret job's store never listened"; }
rank "$p" 1 none.1 ZS_JOB_ID=k
rank "$p" 1 wrong.1 ZS_JOB_ID=k ZS_JOB_SECRET=guess
"${STRANGER[@]}" --port "$p" --probe-get zs/host/0 --job ZS_JOB_ID=k > probe 2>&1
printf 'open-sesame\n' > secret
chmod 644 secret
rank "$p" 1 file644.1 ZS_JOB_ID=k ZS_JOB_SECRET_FILE="$T/secret"
chmod 600 secret
rank "$p" 1 k.1 ZS_JOB_ID=k ZS_JOB_SECRET_FILE="$T/secret"
wait
grep -q "requires the job's secret and rank 1 has none" none.1 ||
    { cat none.1; fail "a rank without the secret was not refused with the reason"; }
grep -q "its secret does not match the job's" wrong.1 ||
    { cat wrong.1; fail "a rank with another secret was not refused with the reason"; }
grep -q "only you can read" file644.1 || { cat file644.1; fail "a readable secret file was taken"; }
grep -q "probe: refused" probe && ! grep -q "probe: value" probe ||
    { cat probe; fail "a client without the secret was not refused, or read a key"; }
ok_hash k.0 "with a secret: rank 0"
ok_hash k.1 "with a secret: rank 1"
echo "ZS_JOB_SECRET: the job runs ($REF); no secret, a wrong one, a raw client and a readable" \
    "secret file are refused"
# Without a secret, the same raw client does read keys: what the secret is for.
p=$(port)
rank "$p" 0 o.0 ZS_JOB_ID=o &
wait_listen "$p" o.0 || { cat o.0; fail "the open job's store never listened"; }
"${STRANGER[@]}" --port "$p" --probe-get zs/world/0 --job ZS_JOB_ID=o > probe.open 2>&1
rank "$p" 1 o.1 ZS_JOB_ID=o
wait
grep -q "probe: welcome" probe.open || { cat probe.open; fail "the raw client's hello was not taken"; }

# ---- junk on gloo's own listening port -----------------------------------------------------
# libgloo takes the first connection to a pair's listening port as the peer, with no check.
p=$(port)
t0=$(date +%s)
rank "$p" 0 g.0 ZS_JOB_ID=g &
rank "$p" 1 g.1 ZS_JOB_ID=g ZS_FAULT_GLOO_DELAY=1:8000 &
gp=""
for _ in $(seq 1 60); do # gloo's pair port: another of rank 0's listening sockets
    pid=$(ss -ltnpH "sport = :$p" | grep -o 'pid=[0-9]*' | head -n 1)
    [[ -n "$pid" ]] && gp=$(ss -ltnpH | grep "$pid," | grep -v ":$p " | awk '{print $4}' |
                            grep -o '[0-9]*$' | head -n 1)
    [[ -n "$gp" ]] && break
    sleep 0.1
done
if [[ -n "$gp" ]]; then
    "${STRANGER[@]}" --port "$gp" --empty 1 > stranger.gloo
    wait
    took=$(($(date +%s) - t0))
    grep -q "gloo: connecting the 2 ranks" g.0 g.1 ||
        { cat g.0 g.1; fail "junk on gloo's port: no named gloo error"; }
    grep -q "^exit 0" g.0 g.1 && { cat g.0 g.1; fail "junk on gloo's port: a rank exited 0"; }
    # rank 1 starts gloo 8 s late; zshard bounds gloo's connect by --comm-timeout + 5 s
    ((took <= 8 + 20 + 5 + 5)) || fail "junk on gloo's port: the job took $took s to end"
    echo "junk on gloo's listening port $gp: the job failed in $took s, naming gloo (documented)"
else
    wait
    echo "not run: gloo's listening port was not seen within 6 s"
fi
echo "PASS"
