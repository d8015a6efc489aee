# Several "hosts" on this machine for the multi-host tests and benchmarks (sourced by bash):
# network namespaces NH_NS[k] with one interface eth0 = NH_IP[k] (10.77.0.k+1/24) each, cabled
# by veth pairs to a bridge that sits in a namespace of its own (NH_SW), so nothing is added
# to this machine's own network. Names carry this run's id: parallel or leftover runs never
# collide. Root (CAP_NET_ADMIN, CAP_SYS_ADMIN) is needed; nh_up says why when it cannot.
#   nh_up N        make N hosts (0 when done; 1 with the reason in NH_WHY)
#   nh_in K CMD..  run CMD in host K (ip netns exec)
#   nh_shape K RATE DELAY  limit host K's link: tc netem (rate and delay), or where the kernel
#                  has no netem, tc tbf (rate only); NH_SHAPED says which
#   nh_unplug K    take host K off the network (its link down: no FIN, no RST); nh_plug K
#   nh_down        remove everything nh_up made (idempotent; call it from an EXIT trap)

NH_ID=$(printf '%04x%02x' $(($$ & 0xffff)) $((RANDOM & 0xff)))
NH_SW="zs${NH_ID}sw"
NH_NS=()
NH_IP=()
NH_WHY=""
NH_SHAPED=""

nh_up() {
    local n=$1 k err
    if ! err=$(ip netns add "$NH_SW" 2>&1); then
        NH_WHY="cannot make network namespaces (ip netns add: ${err:-no ip command}); needs root"
        return 1
    fi
    if ! err=$({ ip -n "$NH_SW" link set lo up &&
                 ip -n "$NH_SW" link add br0 type bridge &&
                 ip -n "$NH_SW" link set br0 up; } 2>&1); then
        NH_WHY="cannot make a bridge in a network namespace: $err"
        return 1
    fi
    for ((k = 0; k < n; k++)); do
        NH_NS[k]="zs${NH_ID}h$k"
        NH_IP[k]="10.77.0.$((k + 1))"
        if ! err=$({ ip netns add "${NH_NS[k]}" &&
                     ip -n "${NH_NS[k]}" link set lo up &&
                     ip -n "$NH_SW" link add "v$k" type veth peer name eth0 netns "${NH_NS[k]}" &&
                     ip -n "$NH_SW" link set "v$k" master br0 up &&
                     ip -n "${NH_NS[k]}" addr add "${NH_IP[k]}/24" dev eth0 &&
                     ip -n "${NH_NS[k]}" link set eth0 up; } 2>&1); then
            NH_WHY="cannot cable host $k (veth into a namespace): $err"
            return 1
        fi
    done
    return 0
}

nh_in() {
    local k=$1
    shift
    ip netns exec "${NH_NS[k]}" "$@"
}

nh_shape() { # K RATE DELAY
    local k=$1 rate=$2 delay=$3 ns
    # both directions: the host's side and the bridge's side of its cable
    for ns in "${NH_NS[k]}:eth0" "$NH_SW:v$k"; do
        if ip netns exec "${ns%%:*}" tc qdisc replace dev "${ns#*:}" root netem delay "$delay" \
            rate "$rate" 2> /dev/null; then
            NH_SHAPED="tc netem delay $delay rate $rate"
        elif ip netns exec "${ns%%:*}" tc qdisc replace dev "${ns#*:}" root tbf rate "$rate" \
            burst 64kb latency 5ms; then
            NH_SHAPED="tc tbf rate $rate (this kernel has no netem qdisc: no added delay)"
        else
            return 1
        fi
    done
}

nh_unplug() {
    ip -n "$NH_SW" link set "v$1" down
}

nh_plug() {
    ip -n "$NH_SW" link set "v$1" up
}

nh_down() {
    local ns
    for ns in "${NH_NS[@]}" "$NH_SW"; do
        ip netns del "$ns" 2>/dev/null || true
    done
}
