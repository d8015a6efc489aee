#!/usr/bin/env bash
# zshard under a real Slurm (22.05, Debian's slurm-wlm) started by this test: one slurmctld on a
# login host and a slurmd on each of 2 compute hosts, each host a network namespace
# (slurm_cluster.sh). Asserted (param_hash against the same world on one host over shm):
#   - `srun -N 2 -n 4 zshard train ...` from the login host, ZeRO-3; `srun -N 2 -n 3` (2 tasks
#     on one node, 1 on the other);
#   - srun asking for more tasks per node than the job's --ntasks-per-node: one line, the same
#     on every task, and no training;
#   - the example sbatch file (examples/slurm/train.sbatch, 2 nodes x 2 tasks) as written,
#     scontrol and all, DDP; the same file without its MASTER_ADDR/MASTER_PORT lines, ZeRO-3
#     (zshard meets at the first node of the list on 10000 + SLURM_JOB_ID mod 20000);
#   - `scontrol requeue` mid-run: saved at SIGTERM, requeued, resumed at that step, and equal
#     to the uninterrupted run; the same through `sbatch --time=1 --signal=TERM@50`, the job
#     requeueing itself (exit 143);
#   - one task SIGKILLed: every node ends within --comm-timeout + 5 s, rank 3 named;
#   - scancel: rank 0 reports the checkpoint saved at SIGTERM, no rank left running.
# Skips (77) with the reason when the daemons cannot start or the build has no gloo.
# Usage: test_slurm.sh BUILD_DIR
set -uo pipefail
KEEP_SLURM_LOGS=${KEEP_SLURM_LOGS:-}
B=$(cd "$1" && pwd)
Z=$B/zshard
HERE=$(cd "$(dirname "$0")" && pwd)
SRC=$(cd "$HERE/.." && pwd)
source "$HERE/netns_hosts.sh"
source "$HERE/slurm_cluster.sh"

T=$(mktemp -d /tmp/zshard-slurm-XXXXXX)
cleanup() {
    sc_down
    rm -rf "$T"
}
trap cleanup EXIT
fail() {
    echo "FAIL: $*" >&2
    for f in "$T"/slurm/*.log; do
        [[ -f "$f" ]] && { echo "--- $f" >&2; tail -n 15 "$f" >&2; }
    done
    exit 1
}
skip() {
    echo "SKIP: $*"
    exit 77
}

[[ "$("$Z" --version)" == *" gloo"* ]] ||
    skip "this build has no gloo (install libgloo-dev; -DZS_GLOO=ON)"
mkdir -p "$T/slurm"
sc_up 2 "$T/slurm" || skip "no Slurm cluster here: $SC_WHY"
LOGIN=2
echo "Slurm cluster up: $(sc_in $LOGIN sinfo -h -o '%P %D nodes %N %T')"

cd "$T" || fail "cd $T"
for i in $(seq 1 3000); do printf 'the king of %d. ' "$i"; done > c.txt
export PATH="$B:$PATH" OMP_NUM_THREADS=1
ARGS="--data $T/c.txt --model gpt2-mini --batch 12 --seq 32 --steps 6 --sample-len 0
      --val-every 0 --comm-timeout 30"
hash_in() { grep -o 'param_hash [0-9a-f]*' "$1" | tail -n 1 | awk '{print $2}'; }

# the reference: 4 ranks on one host over shm, one thread each as under Slurm
# shellcheck disable=SC2086
"$Z" run -n 4 --threads 1 -- "$Z" train $ARGS --stage 3 > ref 2>&1 || { cat ref; fail "reference"; }
REF=$(hash_in ref)
[[ -n "$REF" ]] || { cat ref; fail "no param_hash in the reference"; }

# ---- srun across the two nodes -------------------------------------------------------------
# shellcheck disable=SC2086
sc_in $LOGIN timeout 300 srun -N 2 -n 4 -o "$T/srun.%t" zshard train $ARGS --stage 3 ||
    { cat srun.*; fail "srun -N 2 -n 4 zshard train"; }
grep -q "comm gloo (auto: 4 ranks on several hosts (2 here), met at n0:" srun.0 ||
    { cat srun.0; fail "srun: the banner does not say gloo met at n0"; }
[[ "$(hash_in srun.0)" == "$REF" ]] ||
    { cat srun.0 srun.3; fail "srun -N 2 -n 4: $(hash_in srun.0) != one host's $REF"; }
echo "srun -N 2 -n 4, ZeRO-3: param_hash $REF = 4 ranks on one host"

# uneven: 2 tasks on n0, 1 on n1
# shellcheck disable=SC2086
"$Z" run -n 3 --threads 1 -- "$Z" train $ARGS --stage 3 > ref3 2>&1 || { cat ref3; fail "reference 3"; }
# shellcheck disable=SC2086
sc_in $LOGIN timeout 300 srun -N 2 -n 3 -o "$T/srun3.%t" zshard train $ARGS --stage 3 ||
    { cat srun3.*; fail "srun -N 2 -n 3 zshard train"; }
[[ "$(hash_in srun3.0)" == "$(hash_in ref3)" ]] ||
    { cat srun3.0; fail "srun -N 2 -n 3: $(hash_in srun3.0) != one host's $(hash_in ref3)"; }
echo "srun -N 2 -n 3 (2 tasks on n0, 1 on n1), ZeRO-3: param_hash $(hash_in ref3) = 3 ranks on one host"

# more tasks per node than the job's --ntasks-per-node: Slurm warns and ignores it; zshard
# refuses, the same one line on every task, and nothing trains
cat > over.sbatch << 'J'
#!/bin/bash
#SBATCH --nodes=2 --ntasks-per-node=2 --output=over.out
srun -n 6 --overcommit zshard train --data c.txt --model gpt2-mini --steps 3
J
sc_in $LOGIN timeout 120 sbatch -W over.sbatch > /dev/null 2>&1
want="zshard: srun: 3 tasks on node 0 of the step (SLURM_TASKS_PER_NODE=3(x2)), more than --ntasks-per-node=2 allows"
[[ "$(grep -c '^zshard: ' over.out)" == 6 && "$(grep '^zshard: ' over.out | sort -u)" == "$want"* ]] ||
    { cat over.out; fail "6 tasks on 2 nodes with --ntasks-per-node=2: not refused with one line"; }
! grep -Eq 'step +[0-9]+/' over.out || { cat over.out; fail "--ntasks-per-node exceeded, yet it trained"; }
echo "srun -n 6 in a job of 2 nodes x 2 tasks: '$want'"

# ---- the example sbatch file, as written ---------------------------------------------------
sbatch_run() { # FILE NAME TRAIN_ARGS: runs the job to its end; its output in NAME
    local id
    id=$(TRAIN_ARGS=$3 sc_in $LOGIN timeout 300 sbatch --parsable -W "$1") ||
        fail "sbatch $1 ($2): $id"
    mv "zshard-$id.out" "$2" || fail "sbatch $1 ($2): no zshard-$id.out"
    JOB=$id
}
sbatch_run "$SRC/examples/slurm/train.sbatch" sb_ddp "$ARGS --stage ddp"
[[ "$(hash_in sb_ddp)" == "$REF" ]] ||
    { cat sb_ddp; fail "sbatch train.sbatch, DDP: $(hash_in sb_ddp) != $REF"; }
echo "sbatch examples/slurm/train.sbatch (2 nodes x 2 tasks), DDP: param_hash $REF"

sed '/MASTER_/d' "$SRC/examples/slurm/train.sbatch" > nomaster.sbatch
sbatch_run nomaster.sbatch sb_z3 "$ARGS --stage 3"
want="met at n0:$((10000 + JOB % 20000))"
grep -q "$want" sb_z3 || { cat sb_z3; fail "sbatch without MASTER_*: the banner lacks '$want'"; }
[[ "$(hash_in sb_z3)" == "$REF" ]] ||
    { cat sb_z3; fail "sbatch without MASTER_*, ZeRO-3: $(hash_in sb_z3) != $REF"; }
echo "the same file without its MASTER_ lines, ZeRO-3: $want, param_hash $REF"

# ---- a requeued job resumes ----------------------------------------------------------------
# `scontrol requeue` while the job trains: Slurm sends SIGTERM to every task, zshard saves and
# stops, the job goes back to the queue, starts again from its own script and --resume auto
# continues from that checkpoint to the uninterrupted run's param_hash.
job_state() { sc_in $LOGIN scontrol show job "$1" -o 2> /dev/null | grep -o 'JobState=[A-Z_]*'; }
wait_for() { # SECONDS CMD...: poll CMD until it succeeds
    local end=$((SECONDS + $1))
    shift
    until "$@"; do
        ((SECONDS < end)) || return 1
        sleep 0.5
    done
}
LONG="$ARGS --stage 3 --steps 300"
"$Z" run -n 4 --threads 1 -- "$Z" train $LONG > ref_long 2>&1 || { cat ref_long; fail "reference 300"; }
id=$(TRAIN_ARGS="$LONG --save-dir $T/ck --save-every 0 --resume auto" \
    sc_in $LOGIN sbatch --parsable "$SRC/examples/slurm/train.sbatch") || fail "sbatch: $id"
out=zshard-$id.out
wait_for 120 grep -q 'step *50/300' "$out" 2> /dev/null || { cat "$out"; fail "job $id never reached step 50"; }
sc_in $LOGIN scontrol requeue "$id" || fail "scontrol requeue $id"
t0=$SECONDS
wait_for 300 eval '[[ "$(job_state "$id")" == JobState=COMPLETED ]]' ||
    { cat "$out"; fail "requeued job $id did not complete: $(job_state "$id")"; }
stop=$(grep -o 'stopped by SIGTERM after step [0-9]*' "$out" | head -n 1)
resumed=$(grep -o 'resumed from .* at step [0-9]*' "$out" | tail -n 1)
[[ -n "$stop" && -n "$resumed" && "${stop##* }" == "${resumed##* }" ]] ||
    { cat "$out"; fail "requeue: '$stop' then '$resumed': not stopped and resumed at one step"; }
[[ "$(hash_in "$out")" == "$(hash_in ref_long)" ]] ||
    { cat "$out"; fail "requeued: $(hash_in "$out") != uninterrupted $(hash_in ref_long)"; }
echo "scontrol requeue: $stop, requeued, resumed at step ${resumed##* }:" \
    "param_hash $(hash_in ref_long) = the uninterrupted run ($((SECONDS - t0)) s from the requeue)"

# ---- --signal before the time limit: the job saves, requeues itself and goes on ---------------
# A 1-minute limit and SIGTERM 50 s before it (Slurm sends it at its next check: 8 to 25 s in
# were seen, at most 40): the run saves and stops, the example's script requeues the job (exit
# 143). The test then lifts the limit (as an admin extending a job would), so the requeued run
# resumes and finishes the 1200 steps: the uninterrupted run's param_hash. 1200 steps take
# 90 s here at 75 ms a step, so even a machine twice as fast is still training at 40 s.
SIG="$ARGS --stage 3 --steps 1200"
"$Z" run -n 4 --threads 1 -- "$Z" train $SIG > ref_sig 2>&1 || { cat ref_sig; fail "reference 1200"; }
id=$(TRAIN_ARGS="$SIG --save-dir $T/ck_sig --save-every 0 --resume auto" sc_in $LOGIN \
    sbatch --parsable --time=1 --signal=TERM@50 "$SRC/examples/slurm/train.sbatch") ||
    fail "sbatch --signal: $id"
out=zshard-$id.out
t0=$SECONDS
wait_for 120 grep -q 'stopped by SIGTERM after step' "$out" 2> /dev/null ||
    { cat "$out"; fail "--signal=TERM@50 with --time=1: no SIGTERM within 120 s"; }
sc_in $LOGIN scontrol update JobId="$id" TimeLimit=60 || fail "scontrol update $id TimeLimit=60"
wait_for 900 eval '[[ "$(job_state "$id")" == JobState=COMPLETED ]]' ||
    { cat "$out"; fail "job $id with --signal did not complete: $(job_state "$id")"; }
restarts=$(sc_in $LOGIN scontrol show job "$id" -o | grep -o 'Restarts=[0-9]*')
stops=$(grep -c 'stopped by SIGTERM after step' "$out")
((stops >= 1)) && [[ "$restarts" != Restarts=0 ]] ||
    { cat "$out"; fail "--signal: $stops stops, $restarts: the limit never sent SIGTERM"; }
[[ "$(hash_in "$out")" == "$(hash_in ref_sig)" ]] ||
    { cat "$out"; fail "--signal: $(hash_in "$out") != uninterrupted $(hash_in ref_sig)"; }
echo "sbatch --time=1 --signal=TERM@50: stopped and requeued $stops times ($restarts), at steps" \
    "$(grep -o 'stopped by SIGTERM after step [0-9]*' "$out" | awk '{print $NF}' | tr '\n' ' ')" \
    "in $((SECONDS - t0)) s: param_hash $(hash_in ref_sig) = the uninterrupted run"

# ---- one task killed: every node ends with the rank named -----------------------------------
# SIGKILL to rank 3's process on n1 (an OOM kill, a crashed node's task): the other ranks name
# it, and the job ends on both nodes within --comm-timeout (30 s) + 5 s, nothing left running.
id=$(TRAIN_ARGS="$ARGS --stage 3 --steps 100000" \
    sc_in $LOGIN sbatch --parsable "$SRC/examples/slurm/train.sbatch") || fail "sbatch: $id"
out=zshard-$id.out
wait_for 120 grep -q 'step *20/100000' "$out" 2> /dev/null ||
    { cat "$out"; fail "job $id never reached step 20"; }
victim=""
for p in $(ip netns pids "${NH_NS[1]}"); do
    tr '\0' '\n' < "/proc/$p/environ" 2> /dev/null | grep -qx SLURM_PROCID=3 &&
        [[ "$(readlink "/proc/$p/exe")" == "$Z" ]] && victim=$p
done
[[ -n "$victim" ]] || fail "no rank 3 on n1 among: $(for p in $(ip netns pids "${NH_NS[1]}"); do
    echo "$p $(cat /proc/$p/comm) $(tr '\0' '\n' < /proc/$p/environ | grep PROCID)"; done)"
kill -9 "$victim"
t0=$SECONDS
wait_for 60 eval '[[ "$(job_state "$id")" != JobState=RUNNING ]]' ||
    { cat "$out"; fail "job $id still running 60 s after rank 3 was killed"; }
took=$((SECONDS - t0))
((took <= 35)) || { cat "$out"; fail "the job took $took s to end after rank 3 was killed"; }
[[ "$(job_state "$id")" == JobState=FAILED ]] || fail "job $id: $(job_state "$id"), not FAILED"
named=$(grep -Eo 'lost peer rank ([0-9]+ \([0-9.]+\), )*3 \(10\.77\.0\.2\)' "$out" | head -n 1)
[[ -n "$named" ]] || { cat "$out"; fail "no rank names the killed rank 3 on n1"; }
ranks_on() { # K: how many zshard processes host K runs
    local p
    for p in $(ip netns pids "${NH_NS[$1]}"); do readlink "/proc/$p/exe"; done | grep -c "^$Z\$"
}
no_rank_left() { # WHAT: the ranks gone from both nodes within 10 s
    local k
    for k in 0 1; do
        wait_for 10 eval '(($(ranks_on $k) == 0))' ||
            fail "$1: $(ranks_on $k) zshard processes left on n$k"
    done
}
no_rank_left "rank 3 killed"
rm -f /tmp/zshard-ring-slurm"${id}"_*
echo "rank 3 killed on n1: the job failed on both nodes in $took s (--comm-timeout 30): '$named'"

# ---- scancel: every rank saves and stops -----------------------------------------------------
id=$(TRAIN_ARGS="$ARGS --stage 3 --steps 100000 --save-dir $T/ck_cancel" \
    sc_in $LOGIN sbatch --parsable "$SRC/examples/slurm/train.sbatch") || fail "sbatch: $id"
out=zshard-$id.out
wait_for 120 grep -q 'step *20/100000' "$out" 2> /dev/null ||
    { cat "$out"; fail "job $id never reached step 20"; }
sc_in $LOGIN scancel "$id" || fail "scancel $id"
wait_for 60 eval '[[ "$(job_state "$id")" != JobState=RUNNING ]]' ||
    { cat "$out"; fail "job $id still running 60 s after scancel"; }
wait_for 30 eval 'grep -q "stopped by SIGTERM after step [0-9]* of [0-9]*; checkpoint saved" "$out"' ||
    { cat "$out"; fail "scancel: rank 0 did not save and stop"; }
no_rank_left scancel
echo "scancel: $(grep -o 'stopped by SIGTERM after step [0-9]* of [0-9]*; checkpoint saved' "$out"), $(job_state "$id")"
[[ -n "$KEEP_SLURM_LOGS" ]] && cp "$T"/slurm/*.log "$T"/zshard-*.out "$T"/srun.0 "$T"/over.out "$KEEP_SLURM_LOGS"/
exit 0
