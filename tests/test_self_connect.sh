#!/usr/bin/env bash
# A rank's knock that meets itself (docs/comm.md, "The rendezvous store"). Rank 1 knocks on
# the store's port on its own host before rank 0 listens there. Where that port lies in the
# kernel's ephemeral range, a knock can be given the port itself as its own, and TCP's
# simultaneous open connects the socket to itself: kept, it holds the port, and rank 0's
# store then cannot listen ("Address already in use"). In a network namespace of its own the
# ephemeral range is narrowed to the store's port and one more, so every other knock meets
# itself; rank 0 starts once rank 1 has knocked for 3 s, and the 2-rank job must run.
# Usage: test_self_connect.sh BUILD_DIR
set -uo pipefail
fail() {
    echo "FAIL: $*" >&2
    exit 1
}
skip() {
    echo "SKIP: $*"
    exit 77
}
B=$(cd "$1" && pwd)
W=$B/tests/comm_worker
if [[ "${2:-}" != --inside ]]; then
    command -v unshare > /dev/null || skip "no unshare (util-linux) to make a network namespace"
    err=$(unshare -n true 2>&1) || skip "cannot make a network namespace (unshare -n: $err)"
    exec unshare -n bash "$0" "$B" --inside
fi
RANGE=/proc/sys/net/ipv4/ip_local_port_range
ip link set lo up 2> /dev/null || fail "cannot bring up the namespace's loopback"
T=$(mktemp -d /tmp/zshard-selfconn-XXXXXX)
trap 'kill $(jobs -p) 2> /dev/null; rm -rf "$T"' EXIT
P=40000
read -r LO HI < "$RANGE"
echo "$P $((P + 1))" > "$RANGE" || skip "cannot narrow $RANGE in the namespace"
export ZS_COMM_TIMEOUT=30 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$P OMP_NUM_THREADS=1
(RANK=1 timeout 120 "$W" collectives > "$T/r1" 2>&1; echo "exit $?" >> "$T/r1") &
sleep 3
echo "$LO $HI" > "$RANGE" || fail "cannot restore $RANGE"
(RANK=0 timeout 120 "$W" collectives > "$T/r0" 2>&1; echo "exit $?" >> "$T/r0")
wait
for r in 0 1; do
    grep -q "^exit 0" "$T/r$r" || { cat "$T/r0" "$T/r1"; fail "rank $r did not exit 0"; }
done
echo "rank 1 knocked 3 s on port $P with the ephemeral range $P-$((P + 1)); rank 0's store listened and the job ran"
