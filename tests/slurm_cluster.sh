# A Slurm cluster on this machine for the Slurm tests (sourced by bash, after netns_hosts.sh):
# munged, one slurmctld on a login host and one slurmd per compute host, each daemon in a
# network namespace of netns_hosts.sh with its own host name (a UTS namespace) and /etc/hosts
# (a mount namespace), all sharing this machine's file system as a cluster shares its home.
# Debian's slurm-wlm 22.05 with munge; proctrack/linuxproc and task/none, so no cgroup is
# made. Root is needed; sc_up says why when the daemons cannot start.
#   sc_up N DIR    N compute hosts n0..n(N-1) and the login host zsctl (N hosts + 1 of nh_up);
#                  state, logs and slurm.conf under DIR; 0 when sinfo shows them idle
#   sc_in K CMD..  run CMD on host K (N = the login host) as the daemons see the world
#   sc_down        stop the daemons and the hosts (idempotent; call it from an EXIT trap)

SC_DIR=""
SC_WHY=""
SC_NAMES=()

sc_in() {
    local k=$1
    shift
    nsenter --net="/run/netns/${NH_NS[k]}" unshare --uts --mount sh -c \
        'mount --bind "$1" /etc/hosts && hostname "$2" && shift 2 && exec "$@"' \
        sh "$SC_DIR/hosts" "${SC_NAMES[k]}" "$@"
}

sc_up() { # N DIR
    local n=$1 k
    SC_DIR=$2
    for k in munged slurmctld slurmd sbatch srun scontrol nsenter unshare; do
        command -v "$k" > /dev/null || { SC_WHY="no $k (apt-get install slurm-wlm munge)"; return 1; }
    done
    nh_up $((n + 1)) || { SC_WHY=$NH_WHY; return 1; }
    for ((k = 0; k < n; k++)); do SC_NAMES[k]="n$k"; done
    SC_NAMES[n]=zsctl
    { echo "127.0.0.1 localhost"
      for ((k = 0; k <= n; k++)); do echo "${NH_IP[k]} ${SC_NAMES[k]}"; done; } > "$SC_DIR/hosts"
    mkdir -p "$SC_DIR/munge" "$SC_DIR/ctld" && chmod 700 "$SC_DIR/munge" && chmod 755 "$SC_DIR"
    head -c 1024 /dev/urandom > "$SC_DIR/munge/key" && chmod 400 "$SC_DIR/munge/key"
    if ! munged --force --socket="$SC_DIR/munge/sock" --key-file="$SC_DIR/munge/key" \
        --pid-file="$SC_DIR/munged.pid" --log-file="$SC_DIR/munge/log" \
        --seed-file="$SC_DIR/munge/seed" 2> "$SC_DIR/munge/err"; then
        SC_WHY="munged does not start: $(tail -n 1 "$SC_DIR/munge/err")"
        return 1
    fi
    {
        cat << C
ClusterName=zs
SlurmctldHost=zsctl(${NH_IP[n]})
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$SC_DIR/munge/sock,cred_expire=10
CredType=cred/munge
StateSaveLocation=$SC_DIR/ctld
SlurmdSpoolDir=$SC_DIR/spool-%n
SlurmctldPidFile=$SC_DIR/slurmctld.pid
SlurmdPidFile=$SC_DIR/slurmd-%n.pid
SlurmctldLogFile=$SC_DIR/slurmctld.log
SlurmdLogFile=$SC_DIR/slurmd-%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SwitchType=switch/none
MpiDefault=none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SchedulerType=sched/backfill
SchedulerParameters=sched_interval=2,bf_interval=1
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SlurmdParameters=config_overrides
ReturnToService=2
SlurmctldTimeout=30
SlurmdTimeout=30
KillWait=30
MinJobAge=300
PropagateResourceLimitsExcept=ALL
C
        for ((k = 0; k < n; k++)); do
            echo "NodeName=n$k NodeAddr=${NH_IP[k]} CPUs=2 State=UNKNOWN"
        done
        echo "PartitionName=zs Nodes=n[0-$((n - 1))] Default=YES MaxTime=INFINITE State=UP"
    } > "$SC_DIR/slurm.conf"
    export SLURM_CONF=$SC_DIR/slurm.conf
    if ! sc_in "$n" slurmctld -i > "$SC_DIR/slurmctld.err" 2>&1; then
        SC_WHY="slurmctld does not start: $(tail -n 1 "$SC_DIR/slurmctld.err")"
        return 1
    fi
    for ((k = 0; k < n; k++)); do
        mkdir -p "$SC_DIR/spool-n$k"
        if ! sc_in "$k" slurmd > "$SC_DIR/slurmd-n$k.err" 2>&1; then
            SC_WHY="slurmd does not start on n$k: $(tail -n 1 "$SC_DIR/slurmd-n$k.err"; \
                tail -n 2 "$SC_DIR/slurmd-n$k.log" 2> /dev/null)"
            return 1
        fi
    done
    for _ in $(seq 1 150); do
        [[ "$(sc_in "$n" sinfo -h -o '%T %D' 2> /dev/null)" == "idle $n" ]] && return 0
        sleep 0.2
    done
    SC_WHY="the nodes never became idle: $(sc_in "$n" sinfo -h 2>&1 | head -n 2 | tr '\n' ' ')"
    return 1
}

sc_down() {
    local f
    if [[ -n "$SC_DIR" ]]; then
        for f in "$SC_DIR"/slurmd-*.pid "$SC_DIR"/slurmctld.pid "$SC_DIR"/munged.pid; do
            [[ -f "$f" ]] && kill "$(cat "$f")" 2> /dev/null
        done
        sleep 0.5
    fi
    # whatever is left in the hosts (steps, tasks): a network namespace lists its processes
    for f in "${NH_NS[@]}"; do
        ip netns pids "$f" 2> /dev/null | xargs -r kill -9 2> /dev/null
    done
    nh_down
}
