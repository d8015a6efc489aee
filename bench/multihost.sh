#!/usr/bin/env bash
# zshard across hosts, measured (docs/benchmarks.md): two network namespaces on a bridge stand
# in for two hosts (tests/netns_hosts.sh), one rank each.
#   1. the link: a plain TCP stream between the two namespaces (the ceiling of every
#      collective's bus bandwidth here), then `zshard bench comm` over gloo (two launchers,
#      --nnodes 2) and over mpi (mpirun with an rsh agent entering the namespaces), each row
#      as a share of that link rate;
#   2. with `tc netem` shaping the links (delay and rate), the same, and ZeRO-3 training steps
#      with --prefetch 0, 1 and 2 next to the same job on one host over shm (no network:
#      the step's compute), so that "communication exposed" = step - shm step, and the share
#      of it that prefetching hides is read off;
#   3. 2 hosts x 2 ranks over links shaped to STEP_RATE: ddp, ZeRO-3 and HSDP (ZeRO-3 with a
#      shard group per host) training steps and the bytes each host sends to the other per step
#      (its cable's tx counter over two run lengths, so rendezvous and setup cancel), beside
#      the payload `zshard mem` predicts (docs/sharding.md's formula); HSDP must send at most
#      ddp's bytes and less than ZeRO-3's, and the last lines say whether it does.
# Needs root (ip netns). Usage: [ROUNDS=3] [STEPS_ONLY=1] [STEP_RATE=200mbit] bench/multihost.sh
# BUILD_DIR [RATE [DELAY]] (default 1gbit 1ms; the training steps run at STEP_RATE;
# where the kernel has no netem qdisc, tc tbf limits the rate alone). Prints markdown tables.
set -uo pipefail
B=$(cd "$1" && pwd)
RATE=${2:-1gbit}
DELAY=${3:-1ms}
STEP_RATE=${STEP_RATE:-200mbit}
Z=$B/zshard
HERE=$(cd "$(dirname "$0")" && pwd)
source "$HERE/../tests/netns_hosts.sh"
T=$(mktemp -d /tmp/zshard-bench-multihost-XXXXXX)
trap 'nh_down; rm -rf "$T"' EXIT
nh_up 2 || { echo "bench multihost: $NH_WHY" >&2; exit 1; }
cd "$T" || exit 1
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
port() { shuf -i 20000-60000 -n 1; }

# One TCP stream, host 1 -> host 0, for 3 s: GB/s (1e9 bytes/s), by iperf3 (apt: iperf3), else
# by a Python socket loop (slower than the kernel's own limit on a busy machine).
link_rate() {
    local p sink
    p=$(port)
    if command -v iperf3 > /dev/null; then
        local i r=""
        ip netns exec "${NH_NS[0]}" iperf3 -s -1 -B "${NH_IP[0]}" -p "$p" > /dev/null 2>&1 &
        sink=$!
        # bounded waits for events: the server listening (a loaded machine can take seconds),
        # then a client run whose report has the received rate
        for ((i = 0; i < 600; i++)); do
            [[ -n "$(ip netns exec "${NH_NS[0]}" ss -ltnH "sport = :$p")" ]] && break
            sleep 0.1
        done
        for ((i = 0; i < 5; i++)); do
            [[ -z "$r" ]] || break
            nh_in 1 iperf3 -c "${NH_IP[0]}" -p "$p" -t 3 -J > rate.json 2> /dev/null
            r=$(python3 -c 'import json, sys
try: print("%.3f" % (json.load(open(sys.argv[1]))["end"]["sum_received"]["bits_per_second"] / 8e9))
except Exception: pass' rate.json)
        done
        kill "$sink" 2> /dev/null
        wait "$sink" 2> /dev/null
        if [[ -n "$r" ]]; then
            echo "$r iperf3"
            return
        fi
        p=$(port)
    fi
    cat > sink.py << 'EOF'
import socket, sys, time
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((sys.argv[1], int(sys.argv[2]))); s.listen(1)
c, _ = s.accept(); buf = bytearray(4 << 20); n = 0; t0 = None
while True:
    k = c.recv_into(buf)
    if not k: break
    if t0 is None: t0 = time.perf_counter()
    n += k
print("%.3f" % (n / (time.perf_counter() - t0) / 1e9))
EOF
    cat > source.py << 'EOF'
import socket, sys, time
for _ in range(200):
    try:
        c = socket.create_connection((sys.argv[1], int(sys.argv[2]))); break
    except OSError: time.sleep(0.05)
buf = bytes(4 << 20)
for _ in range(256): c.sendall(buf)
c.close()
EOF
    nh_in 0 python3 sink.py "${NH_IP[0]}" "$p" > rate.out &
    sink=$!
    nh_in 1 python3 source.py "${NH_IP[0]}" "$p"
    wait "$sink"
    echo "$(cat rate.out) Python"
}

bench_gloo() { # CEILING
    local p k
    p=$(port)
    nh_in 1 "$Z" run -n 1 --nnodes 2 --node-rank 1 --master-addr "${NH_IP[0]}" \
        --master-port "$p" -- "$Z" bench comm --comm gloo --min-size 1M --max-size 64M \
        --iters 5 --ceiling "link=$1" > gloo.1 2>&1 &
    nh_in 0 "$Z" run -n 1 --nnodes 2 --node-rank 0 --master-addr "${NH_IP[0]}" \
        --master-port "$p" -- "$Z" bench comm --comm gloo --min-size 1M --max-size 64M \
        --iters 5 --ceiling "link=$1" > gloo.0 2>&1
    wait
    sed -n 's/^\[0\] //p' gloo.0 | grep '^gloo '
}

bench_mpi() { # CEILING
    mkdir -p tmp0 tmp1
    cat > rsh.sh << EOF
#!/bin/sh
while [ "\${1#-}" != "\$1" ]; do shift; done
host=\$1; shift
case \$host in
${NH_IP[0]}) ns=${NH_NS[0]}; t=$T/tmp0 ;;
${NH_IP[1]}) ns=${NH_NS[1]}; t=$T/tmp1 ;;
*) exit 1 ;;
esac
exec ip netns exec "\$ns" env TMPDIR="\$t" sh -c "\$*"
EOF
    chmod +x rsh.sh
    TMPDIR=$T/tmp0 nh_in 0 mpirun --allow-run-as-root -np 2 --host "${NH_IP[0]}:1,${NH_IP[1]}:1" \
        --mca plm_rsh_agent "$T/rsh.sh" --mca btl tcp,self --mca btl_tcp_if_include 10.77.0.0/24 \
        --mca oob_tcp_if_include 10.77.0.0/24 -x OMP_NUM_THREADS -x OPENBLAS_NUM_THREADS \
        "$Z" bench comm --comm mpi --min-size 1M --max-size 64M --iters 5 --ceiling "link=$1" > mpi.out 2>&1
    grep '^mpi ' mpi.out
}

# Best of ROUNDS alternating gloo and mpi runs for each row: this machine is shared, and a
# round that another job slowed says nothing about either backend.
ROUNDS=${ROUNDS:-3}
table() { # TITLE LINK TOOL
    local r
    echo "### $1"
    echo
    echo "One TCP stream between the namespaces ($3, host 1 to host 0): $2 GB/s. busbw as"
    echo "nccl-tests define it; %link = busbw / that stream's rate. 2 hosts x 1 rank; each row the"
    echo "best of $ROUNDS runs, gloo and mpi taking turns."
    echo
    echo "| comm | op | bytes | ms | algbw GB/s | busbw GB/s | %link |"
    echo "|---|---|---:|---:|---:|---:|---:|"
    for ((r = 0; r < ROUNDS; r++)); do bench_gloo "$2"; bench_mpi "$2"; done |
        awk '{ k = $1 " " $2 " " $3; if (!(k in best) || $4 < best[k]) { best[k] = $4; row[k] = $0 }
               if (!(k in seen)) { seen[k] = 1; order[n++] = k } }
             END { for (i = 0; i < n; i++) { split(row[order[i]], f, " ")
                   printf "| %s | %s | %s | %s | %s | %s | %s |\n", f[1], f[2], f[3], f[4], f[5], f[6], f[7] } }'
    echo
}

echo "## Across hosts: gloo and mpi in network namespaces"
echo
echo "$(getconf _NPROCESSORS_ONLN) cores (load average $(cut -d" " -f1-3 /proc/loadavg) at the start), $(date -u +%Y-%m-%d); zshard $("$Z" --version | head -n 1)"
echo
# MESH_ONLY=1: part 3 alone.
[[ "${MESH_ONLY:-0}" == 1 ]] && STEPS_ONLY=1
# STEPS_ONLY=1: the training-step part alone (the links shaped the same way).
if [[ "${STEPS_ONLY:-0}" != 1 ]]; then
    read -r l tool <<< "$(link_rate)"
    table "Unshaped veth links" "$l" "$tool"
fi

nh_shape 0 "$RATE" "$DELAY" && nh_shape 1 "$RATE" "$DELAY" || { echo "tc failed" >&2; exit 1; }
if [[ "${STEPS_ONLY:-0}" != 1 ]]; then
    read -r l tool <<< "$(link_rate)"
    table "Links shaped: $NH_SHAPED (each host's cable, both ends)" "$l" "$tool"
fi

# ZeRO-3 steps: prefetch on and off over links shaped to STEP_RATE (slower than RATE, so that
# communication is as long as the step's compute), and the same job on one host; each the
# median step of a run (steps 4.. of its log), best of ROUNDS runs taken in turns.
nh_shape 0 "$STEP_RATE" "$DELAY" && nh_shape 1 "$STEP_RATE" "$DELAY" || { echo "tc failed" >&2; exit 1; }
for i in $(seq 1 3000); do printf 'the king of %d. ' "$i"; done > c.txt
if [[ "${MESH_ONLY:-0}" != 1 ]]; then
ARGS=(train --data "$T/c.txt" --model gpt2-mini --stage 3 --batch 8 --seq 128 --steps 30
      --sample-len 0 --val-every 0)
median_ms() {
    python3 -c 'import json, statistics, sys
ms = [json.loads(l)["ms"] for l in open(sys.argv[1]) if "\"step\"" in l and "\"ms\"" in l]
print("%.1f" % statistics.median(ms[3:]))' "$1"
}
best=()
for ((r = 0; r < ROUNDS; r++)); do
    rm -f shm.jsonl
    "$Z" run -n 2 --threads 1 -- "$Z" "${ARGS[@]}" --log "$T/shm.jsonl" > shm.out 2>&1
    v[0]=$(median_ms shm.jsonl)
    for pf in 2 1 0; do
        p=$(port)
        rm -f "pf$pf.jsonl"
        nh_in 1 "$Z" run -n 1 --threads 1 --nnodes 2 --node-rank 1 --master-addr "${NH_IP[0]}" \
            --master-port "$p" -- "$Z" "${ARGS[@]}" --prefetch "$pf" > "pf$pf.1" 2>&1 &
        nh_in 0 "$Z" run -n 1 --threads 1 --nnodes 2 --node-rank 0 --master-addr "${NH_IP[0]}" \
            --master-port "$p" -- "$Z" "${ARGS[@]}" --prefetch "$pf" --log "$T/pf$pf.jsonl" \
            > "pf$pf.0" 2>&1
        wait
        v[3 - pf]=$(median_ms "pf$pf.jsonl")
    done
    for k in 0 1 2 3; do
        if [[ -z "${best[k]:-}" ]] || awk -v a="${v[k]}" -v b="${best[k]}" 'BEGIN { exit !(a < b) }'; then
            best[k]=${v[k]}
        fi
    done
done
s=${best[0]}
p2=${best[1]}
p1=${best[2]}
p0=${best[3]}
echo "### ZeRO-3 with and without prefetch over the shaped links ($NH_SHAPED)"
echo
echo "gpt2-mini, batch 8 x seq 128, 2 hosts x 1 rank over gloo; the same 2 ranks on one host over"
echo "shm give the step's compute (their communication is memory copies). Median step of a run"
echo "(steps 4-30), best of $ROUNDS runs taken in turns."
echo
echo "| run | ms/step | communication exposed (ms/step) |"
echo "|---|---:|---:|"
echo "| one host, shm (compute) | $s | - |"
awk -v s="$s" -v a="$p0" -v b="$p1" -v c="$p2" 'BEGIN {
    printf "| 2 hosts, gloo, --prefetch 0 | %s | %.1f |\n", a, a - s
    printf "| 2 hosts, gloo, --prefetch 1 | %s | %.1f |\n", b, b - s
    printf "| 2 hosts, gloo, --prefetch 2 | %s | %.1f |\n", c, c - s
    if (a - s > 0)
        printf "\nOf the communication --prefetch 0 exposes, --prefetch 1 hides %.0f%%, --prefetch 2 %.0f%%.\n",
               100 * (1 - (b - s) / (a - s)), 100 * (1 - (c - s) / (a - s))
}'
fi

# ---- 3. 2 hosts x 2 ranks: bytes across hosts per step ---------------------------------------
# Host k's cable (eth0 in its namespace) counts every byte it sends: payload, TCP/IP headers
# and the acknowledgements of what it receives. A run of STEPS_A steps and one of STEPS_B
# differ by their steps alone, so (tx_A - tx_B) / (STEPS_A - STEPS_B) is a step's bytes.
STEPS_A=${STEPS_A:-8}
STEPS_B=${STEPS_B:-4}
tx() { nh_in "$1" cat /sys/class/net/eth0/statistics/tx_bytes; }
mesh_run() { # OUT STEPS ARGS...: 2 hosts x 2 ranks; prints host 0's and host 1's tx bytes
    local out=$1 n=$2 p a0 a1
    shift 2
    p=$(port)
    a0=$(tx 0)
    a1=$(tx 1)
    nh_in 1 "$Z" run -n 2 --threads 1 --nnodes 2 --node-rank 1 --master-addr "${NH_IP[0]}" \
        --master-port "$p" -- "$Z" "${MARGS[@]}" --steps "$n" "$@" > "$out.1" 2>&1 &
    nh_in 0 "$Z" run -n 2 --threads 1 --nnodes 2 --node-rank 0 --master-addr "${NH_IP[0]}" \
        --master-port "$p" -- "$Z" "${MARGS[@]}" --steps "$n" "$@" --log "$T/$out.jsonl" \
        > "$out.0" 2>&1
    wait
    echo "$(($(tx 0) - a0)) $(($(tx 1) - a1))"
}
mesh_model() { # MODEL
    MARGS=(train --data "$T/c.txt" --model "$1" --batch 8 --seq 64 --sample-len 0 --val-every 0
           --comm-timeout 300)
    local psi plan st row form
    # zshard mem's own prediction: Ψ, and the bytes a rank sends to other hosts per plan
    # (docs/sharding.md "Bytes across hosts"), which a host sends twice (2 ranks).
    plan=$("$Z" mem --model "$1" --nproc 2 --nnodes 2 --stage 3 --shard-group host --batch 8 \
        --seq 64 --data "$T/c.txt")
    psi=$(sed -n 's/.*(\([0-9]*\) with alignment and shard padding).*/\1/p' <<< "$plan")
    for st in ddp 3 hsdp; do
        local args=(--stage "$st")
        row="ddp"
        [[ $st == 3 ]] && row="ZeRO-3"
        [[ $st == hsdp ]] && { args=(--stage 3 --shard-group host); row="ZeRO-3, 2 replicas x shard groups of 2"; }
        form=$(awk -F'|' -v r=" $row " '$2 == r { print $5 * 2 }' <<< "$plan")
        read -r a0 a1 <<< "$(mesh_run "m$st.a" "$STEPS_A" "${args[@]}")"
        read -r b0 b1 <<< "$(mesh_run "m$st.b" "$STEPS_B" "${args[@]}")"
        python3 -c 'import json, statistics, sys
a0, a1, b0, b1, n = (int(x) for x in sys.argv[1:6])
ms = [json.loads(l)["ms"] for l in open(sys.argv[6]) if "\"step\"" in l and "\"ms\"" in l]
per = ((a0 - b0) + (a1 - b1)) / 2 / n
form = float(sys.argv[10])
name = {"ddp": "ddp", "3": "ZeRO-3", "hsdp": "HSDP ZeRO-3 (shard group per host)"}[sys.argv[8]]
print("| %s | %s | %s | %.1f | %.2f | %.2f | %.3f |" % (sys.argv[7], name, sys.argv[9],
      statistics.median(ms[2:]), per / 1e6, form, per / 1e6 / form))
open(sys.argv[11], "a").write("%s %s %.0f\n" % (sys.argv[7], sys.argv[8], per))' "$a0" "$a1" \
            "$b0" "$b1" "$((STEPS_A - STEPS_B))" "m$st.a.jsonl" "$1" "$st" "$psi" "$form" \
            "$T/per_host"
    done
}
echo
echo "### Bytes across hosts per step: 2 hosts x 2 ranks ($NH_SHAPED)"
echo
echo "batch 8 x seq 64, fp32, over gloo. MB sent = the bytes one host's cable sends per step"
echo "(mean of the two hosts; payload, TCP/IP headers and acknowledgements), from runs of"
echo "$STEPS_A and $STEPS_B steps. ms/step: the median step of the $STEPS_A-step run (steps 3..)."
echo "HSDP: ZeRO-3 with --shard-group host. The formula's payload is zshard mem's prediction."
echo
echo "| model | plan | Ψ padded | ms/step | MB sent per host per step | formula's payload MB (zshard mem) | ratio |"
echo "|---|---|---:|---:|---:|---:|---:|"
for model in ${MESH_MODELS:-gpt2-mini}; do mesh_model "$model"; done
echo
# HSDP must send at most what ddp sends across hosts, and less than ZeRO-3 (measured).
awk '{ b[$1 " " $2] = $3; m[$1] = 1 }
     END { for (x in m) {
         h = b[x " hsdp"]; d = b[x " ddp"]; z = b[x " 3"]
         printf "%s: HSDP sends %.0f%% of ddp'"'"'s bytes across hosts and %.0f%% of ZeRO-3'"'"'s: %s\n", x,
                100 * h / d, 100 * h / z, (h <= d && h < z) ? "as it must" : "**NOT** below both"
     } }' "$T/per_host"
