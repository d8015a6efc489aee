#!/bin/sh
# Busy cores: time a single-rank training run on a quiet machine and
# while a CPU hog holds every core, with zshard's thread defaults (a share of the cores,
# OMP_WAIT_POLICY=passive) and with the runtime's old defaults (every core, active
# spin-waiting). A timing, so a benchmark and not a test: it depends on the machine and on
# whatever else runs on it.
#
#   sh bench/busy_cores.sh [path/to/zshard] [steps]
set -eu
Z=${1:-build/zshard}
STEPS=${2:-15}
CORES=$(nproc)
DIR=$(mktemp -d /tmp/zshard-busy-XXXXXX)
HOGS=""
cleanup() {
    for p in $HOGS; do kill "$p" 2>/dev/null || true; done
    rm -rf "$DIR"
}
trap cleanup EXIT INT TERM
i=0
while [ $i -lt 3000 ]; do printf 'and so the king of %d went to sea. ' $i; i=$((i + 1)); done > "$DIR/c.txt"

# Seconds of training (the summary's figure) of one run; extra environment in $1.
run() {
    env -u OMP_NUM_THREADS -u OPENBLAS_NUM_THREADS -u OMP_WAIT_POLICY $1 \
        timeout 300 "$Z" train --data "$DIR/c.txt" --model gpt2-mini --batch 16 --seq 64 \
        --steps "$STEPS" --val-every 0 --sample-len 0 --quiet |
        sed -n 's/^summary: [0-9]* steps in \([0-9.]*\) s.*/\1/p'
}
OLD="OMP_NUM_THREADS=$CORES OMP_WAIT_POLICY=active"
q_new=$(run "")
q_old=$(run "$OLD")
i=0
while [ $i -lt "$CORES" ]; do
    sh -c 'while :; do :; done' &
    HOGS="$HOGS $!"
    i=$((i + 1))
done
sleep 1
b_new=$(run "")
b_old=$(run "$OLD")
echo "| threads | quiet (s) | $CORES busy-loop hogs (s) | busy / quiet |"
echo "|---|---:|---:|---:|"
echo "| zshard defaults (share of $CORES cores, passive) | $q_new | $b_new | $(echo "$b_new / $q_new" | bc -l | cut -c1-5) |"
echo "| $OLD | $q_old | $b_old | $(echo "$b_old / $q_old" | bc -l | cut -c1-5) |"
echo "($STEPS steps of gpt2-mini, batch 16 x seq 64, one rank; $(uname -m), $CORES cores)"
