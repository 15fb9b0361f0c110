# netns.sh — helpers of the network fault-injection tests: a small network of
# real hosts made of Linux network namespaces, with ps_server and worker
# processes started inside them, and faults put on their links.
#
# Topology: one "switch" namespace holding a bridge, and one namespace per host
# (ps0, ps1, w0, ...), each joined to the bridge by a veth pair: "eth0" in the
# host, "v-<host>" on the switch, address 10.77.0.N/24. Every name carries the
# test's pid, so tests running in parallel (ctest -j) never share one; the
# trap removes them all (deleting a namespace removes its links and the bridge).
#
# Source it after lib.sh. netns_require exits 77 (skipped) with a reason where
# namespaces cannot be made (not root, no iproute2, no permission).
#
# Fault helpers:
#   net_cut HOST / net_restore HOST   — the host's switch port down / up: every
#                                       packet to and from it is lost (a pulled cable)
#   net_impair HOST DELAY_MS LOSS_PCT RATE_KBIT / net_unimpair HOST
#                                     — netem (delay + loss) where the kernel has it,
#                                       else htb rate limit (queueing delay) + iptables
#                                       statistic random drop; NET_IMPAIR_METHOD says which
#   net_rate HOST KBIT                — htb rate limit only, both ways (undone by net_unimpair)
#   net_backlog HOST                  — bytes queued in the host's outgoing direction
NETNS_PREFIX="psct-$$"
NETNS_SW="$NETNS_PREFIX-sw"
NETNS_HOSTS=()
declare -A NETNS_IP=()
NETNS_NEXT_IP=2
NETNS_MADE=0

_netns_skip() { skip "$@"; }

# netns_require_tc — skips (77) without tc, which the link impairments need.
netns_require_tc() { command -v tc >/dev/null 2>&1 || _netns_skip "no tc (Debian package iproute2)"; }

netns_cleanup() {
    local h
    [ "$NETNS_MADE" = 1 ] || return 0
    for h in "${NETNS_HOSTS[@]}"; do ip netns del "$NETNS_PREFIX-$h" 2>/dev/null || true; done
    ip netns del "$NETNS_SW" 2>/dev/null || true
}

# Namespaces left by a run of these tests that was killed (SIGKILL skips the
# trap): psct-PID-* whose PID is gone and that hold no process.
_netns_sweep_stale() {
    local ns pid
    for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep '^psct-[0-9]*-' || true); do
        pid=${ns#psct-}; pid=${pid%%-*}
        kill -0 "$pid" 2>/dev/null && continue
        [ -z "$(ip netns pids "$ns" 2>/dev/null)" ] || continue
        ip netns del "$ns" 2>/dev/null || true
    done
}

# netns_require — skips the test (77) unless namespaces, veths and a bridge can be made.
netns_require() {
    [ "$(id -u)" = 0 ] || _netns_skip "network namespaces need root"
    command -v ip >/dev/null 2>&1 || _netns_skip "no ip command (Debian package iproute2)"
    _netns_sweep_stale
    trap 'cleanup; netns_cleanup' EXIT
    trap 'exit 1' INT TERM
    NETNS_MADE=1
    ip netns add "$NETNS_SW" 2>"$TMP/netns.err" || _netns_skip "cannot create a network namespace: $(cat "$TMP/netns.err")"
    ip -n "$NETNS_SW" link set lo up
    ip -n "$NETNS_SW" link add br0 type bridge 2>"$TMP/netns.err" || _netns_skip "cannot create a bridge: $(cat "$TMP/netns.err")"
    ip -n "$NETNS_SW" link set br0 up
}

# netns_host NAME — a host namespace joined to the switch; sets NETNS_IP[NAME].
netns_host() {
    local h=$1 ns="$NETNS_PREFIX-$1" ip4="10.77.0.$NETNS_NEXT_IP"
    NETNS_NEXT_IP=$((NETNS_NEXT_IP + 1))
    ip netns add "$ns" || fail "cannot create namespace $ns"
    NETNS_HOSTS+=("$h")
    ip -n "$ns" link set lo up
    # made inside the switch namespace, so no name ever appears in the root namespace
    ip -n "$NETNS_SW" link add "v-$h" type veth peer name eth0 netns "$ns" 2>"$TMP/netns.err" ||
        _netns_skip "cannot create a veth pair: $(cat "$TMP/netns.err")"
    ip -n "$NETNS_SW" link set "v-$h" master br0
    ip -n "$NETNS_SW" link set "v-$h" up
    ip -n "$ns" addr add "$ip4/24" dev eth0
    ip -n "$ns" link set eth0 up
    NETNS_IP[$h]=$ip4
}

# nsx HOST CMD... — runs CMD in HOST's namespace (keeps the environment).
nsx() { local h=$1; shift; ip netns exec "$NETNS_PREFIX-$h" "$@"; }

# ns_cluster "PS_HOSTS..." "WORKER_HOSTS..." [PORT] — sets CLUSTER, PS_ADDR, WORKER_ADDR,
# PS_HOST, WORKER_HOST (the hosts must exist). Every task listens on PORT (2222).
ns_cluster() {
    local port=${3:-2222} h
    read -ra PS_HOST <<<"$1"; read -ra WORKER_HOST <<<"$2"; PS_ADDR=(); WORKER_ADDR=()
    for h in "${PS_HOST[@]}"; do PS_ADDR+=("${NETNS_IP[$h]}:$port"); done
    for h in "${WORKER_HOST[@]}"; do WORKER_ADDR+=("${NETNS_IP[$h]}:$port"); done
    local ps_json w_json
    ps_json=$(printf '"%s",' "${PS_ADDR[@]}"); w_json=$(printf '"%s",' "${WORKER_ADDR[@]}")
    CLUSTER="{\"ps\": [${ps_json%,}], \"worker\": [${w_json%,}]}"
}

# ns_start_ps I [flags...] — ps I in its host's namespace (log $TMP/psI.log), sets LAST_PID
# (ip netns exec execs the program: the pid is the ps_server's own).
ns_start_ps() {
    local i=$1; shift
    TF_CONFIG=$(tf_config ps "$i") ip netns exec "$NETNS_PREFIX-${PS_HOST[i]}" "$BIN/ps_server" "$@" \
        >>"$TMP/ps$i.log" 2>&1 &
    LAST_PID=$!; PIDS+=("$LAST_PID")
}

# ns_start_worker I JOBSPEC [flags...] — stdout $TMP/workerI.out, stderr $TMP/workerI.log.
ns_start_worker() {
    local i=$1 spec=$2; shift 2
    TF_CONFIG=$(tf_config worker "$i") ip netns exec "$NETNS_PREFIX-${WORKER_HOST[i]}" "$BIN/worker" \
        --job_spec "$spec" --log_every_secs 0.5 "$@" >>"$TMP/worker$i.out" 2>>"$TMP/worker$i.log" &
    LAST_PID=$!; PIDS+=("$LAST_PID")
}

# ns_health FROM_HOST ADDR [WAIT_MS] — psc_health run from FROM_HOST's namespace.
ns_health() { nsx "$1" "$BIN/psc_health" "$2" "${3:-20000}" >/dev/null 2>&1; }

# ns_wait_healthy FROM_HOST ADDR [SECS] — waits until ADDR accepts TCP connections
# from FROM_HOST, then until its health service is SERVING (connecting first
# spares psc_health gRPC's reconnect backoff after a refused first attempt).
ns_wait_healthy() {
    local from=$1 addr=$2 secs=${3:-20} t=0
    until nsx "$from" timeout 1 bash -c "exec 3<>/dev/tcp/${addr%:*}/${addr##*:}" 2>/dev/null; do
        sleep 0.1; t=$((t + 1))
        [ $t -le $((secs * 10)) ] || { netns_dump >&2; fail "$addr does not accept connections from $from"; }
    done
    ns_health "$from" "$addr" $((secs * 1000)) || { netns_dump >&2; fail "$addr not serving (seen from $from)"; }
}

# netns_dump — the state of the switch and every host's link (for a failure's log).
netns_dump() {
    local h
    echo "---- network: bridge ports, every host's eth0 and neighbours ----"
    bridge -n "$NETNS_SW" link 2>&1 || true
    for h in "${NETNS_HOSTS[@]}"; do
        echo "$h: $(nsx "$h" ip -br addr show dev eth0 2>&1) | $(nsx "$h" ip neigh 2>&1 | tr '\n' ';')"
    done
}

# wait_log_re FILE REGEX SECS — 0 once FILE has a line matching REGEX, 1 after SECS.
wait_log_re() {
    local t=0
    until grep -Eq "$2" "$1" 2>/dev/null; do sleep 0.1; t=$((t + 1)); [ $t -le $(($3 * 10)) ] || return 1; done
}

# ns_reach FROM_HOST TO_HOST PORT — 0 when a TCP connection from FROM to TO:PORT
# opens within 2 s (bash's /dev/tcp; there is no ping here).
ns_reach() {
    nsx "$1" timeout 2 bash -c "exec 3<>/dev/tcp/${NETNS_IP[$2]}/$3" 2>/dev/null
}

# ---- faults ----

net_cut() { ip -n "$NETNS_SW" link set "v-$1" down; }
net_restore() { ip -n "$NETNS_SW" link set "v-$1" up; }

# The iptables that works in a namespace here: the nft backend, else legacy.
_netns_iptables() {
    local h=$1 c
    for c in iptables iptables-legacy; do
        command -v "$c" >/dev/null 2>&1 || continue
        nsx "$h" "$c" -w -L INPUT -n >/dev/null 2>&1 && { echo "$c"; return 0; }
    done
    return 1
}

# netns_has_netem — 0 when the kernel has the netem qdisc (tried on a scratch namespace's lo).
netns_has_netem() {
    command -v tc >/dev/null 2>&1 || return 1
    ip netns add "$NETNS_PREFIX-probe" 2>/dev/null || return 1
    local ok=1
    ip netns exec "$NETNS_PREFIX-probe" tc qdisc add dev lo root netem delay 1ms 2>/dev/null && ok=0
    ip netns del "$NETNS_PREFIX-probe" 2>/dev/null || true
    return $ok
}

# net_impair HOST DELAY_MS LOSS_PCT RATE_KBIT — impairs both directions of HOST's link.
# netem: delay DELAY_MS and LOSS_PCT % loss each way (RATE_KBIT unused).
# Otherwise: htb at RATE_KBIT each way (a slow link: transfers take longer and queue) and
# iptables' statistic match dropping LOSS_PCT % of packets each way (DELAY_MS unused).
# Sets NET_IMPAIR_METHOD to a description. Fails the test when neither works.
net_impair() {
    local h=$1 delay=$2 loss=$3 rate=$4 ipt
    command -v tc >/dev/null 2>&1 || fail "no tc command (Debian package iproute2)"
    if netns_has_netem; then
        nsx "$h" tc qdisc add dev eth0 root netem delay "${delay}ms" loss "${loss}%" || fail "netem on $h"
        ip netns exec "$NETNS_SW" tc qdisc add dev "v-$h" root netem delay "${delay}ms" loss "${loss}%" || fail "netem on v-$h"
        NET_IMPAIR_METHOD="netem: delay ${delay} ms and loss ${loss} % each way"
        return 0
    fi
    ipt=$(_netns_iptables "$h") || fail "no working iptables in a namespace (Debian package iptables)"
    local p
    p=$(awk -v l="$loss" 'BEGIN { printf "%.4f", l / 100 }')
    local dev
    for dev in "$h:eth0" "sw:v-$h"; do
        local where=${dev%%:*} d=${dev#*:} run=(nsx "$h")
        [ "$where" = sw ] && run=(ip netns exec "$NETNS_SW")
        "${run[@]}" tc qdisc add dev "$d" root handle 1: htb default 10 || fail "htb on $d"
        "${run[@]}" tc class add dev "$d" parent 1: classid 1:10 htb rate "${rate}kbit" ceil "${rate}kbit" ||
            fail "htb class on $d"
    done
    nsx "$h" "$ipt" -w -A INPUT -i eth0 -m statistic --mode random --probability "$p" -j DROP ||
        fail "$ipt statistic match (INPUT) on $h"
    nsx "$h" "$ipt" -w -A OUTPUT -o eth0 -m statistic --mode random --probability "$p" -j DROP ||
        fail "$ipt statistic match (OUTPUT) on $h"
    NET_IMPAIR_METHOD="emulated (no netem in this kernel): htb rate ${rate} kbit/s each way (queueing delay) + $ipt statistic random drop ${loss} % each way"
}

# net_rate HOST KBIT — a slow link and nothing else: htb at KBIT kbit/s each way.
net_rate() {
    local h=$1 rate=$2 d q
    # htb's quantum (bytes a class may send per round) defaults to rate / 10 and
    # must stay within 1,514..200,000 bytes
    q=$((rate * 1000 / 8 / 10)); [ $q -gt 200000 ] && q=200000; [ $q -lt 1514 ] && q=1514
    for d in "h:eth0" "sw:v-$h"; do
        local dev=${d#*:} run=(nsx "$h")
        [ "${d%%:*}" = sw ] && run=(ip netns exec "$NETNS_SW")
        "${run[@]}" tc qdisc add dev "$dev" root handle 1: htb default 10 || fail "htb on $dev"
        "${run[@]}" tc class add dev "$dev" parent 1: classid 1:10 htb rate "${rate}kbit" ceil "${rate}kbit" \
            quantum "$q" || fail "htb class on $dev"
    done
}

# net_backlog HOST — bytes waiting in HOST's outgoing queue (its eth0 root qdisc):
# under net_rate, non-zero while the host sends more than the link carries.
net_backlog() {
    nsx "$1" tc -s qdisc show dev eth0 | awk '$1 == "backlog" { sub(/b$/, "", $2); print $2 + 0; exit }'
}

net_unimpair() {
    local h=$1 ipt
    nsx "$h" tc qdisc del dev eth0 root 2>/dev/null || true
    ip netns exec "$NETNS_SW" tc qdisc del dev "v-$h" root 2>/dev/null || true
    if ipt=$(_netns_iptables "$h"); then nsx "$h" "$ipt" -w -F INPUT; nsx "$h" "$ipt" -w -F OUTPUT; fi
}

# ns_metric HOST ADDR NAME — the value of Prometheus series NAME (summed over its
# labels) from the /metrics page at ADDR, fetched from HOST's namespace with
# bash's /dev/tcp (no curl needed); empty when the page cannot be read.
ns_metric() {
    nsx "$1" timeout 2 bash -c "exec 3<>/dev/tcp/${2%:*}/${2##*:} && printf 'GET /metrics HTTP/1.0\r\n\r\n' >&3 && cat <&3" 2>/dev/null |
        awk -v n="$3" '$1 == n || index($1, n "{") == 1 { s += $2; f = 1 } END { if (f) printf "%d\n", s }'
}

# ---- reading the workers' progress lines ----

# last_progress FILE — "SECS STEP GLOBAL_STEP" of the newest progress line of a worker log
# (SECS: seconds since midnight UTC of the line's timestamp, with ms), empty when none yet.
last_progress() {
    { grep -a ' epoch [0-9]*/[0-9]* step [0-9]*/' "$1" 2>/dev/null || true; } | tail -n 1 |
        awk '{ split(substr($1, 12, 12), t, ":"); s = t[1] * 3600 + t[2] * 60 + t[3];
               for (i = 1; i < NF; i++) { if ($i == "step") { split($(i + 1), a, "/"); st = a[1] } if ($i == "global_step") gs = $(i + 1) }
               printf "%.3f %d %d\n", s, st, gs }'
}

# rate A B — steps per second between two last_progress samples (handles midnight).
rate() {
    awk -v a="$1" -v b="$2" 'BEGIN { split(a, x, " "); split(b, y, " "); dt = y[1] - x[1]; if (dt < 0) dt += 86400;
                                     if (dt <= 0) { print "0"; exit } printf "%.2f\n", (y[2] - x[2]) / dt }'
}

# ---- a 1 ps + 1 worker training run (the link benchmarks) ----

# ns_train_one NAME SPEC [WORKER_FLAGS...] — ps 0 and worker 0 on their hosts (ns_cluster) train
# SPEC to its end; prints the examples/s of the worker's "finished N steps" line. Their logs
# are kept as $TMP/*.log.NAME and $TMP/*.out.NAME.
ns_train_one() {
    local name=$1 spec=$2 ps w f
    shift 2
    ns_start_ps 0; ps=$LAST_PID
    ns_wait_healthy "${WORKER_HOST[0]}" "${PS_ADDR[0]}"
    ns_start_worker 0 "$spec" "$@"; w=$LAST_PID
    wait_exit "$w" 600; [ "$EXIT_CODE" = 0 ] || fail "$name: worker exited $EXIT_CODE: $(tail -3 "$TMP/worker0.log")"
    wait_exit "$ps" 30
    sed -n 's/.*finished [0-9]* steps in [0-9.]* s (\([0-9]*\) examples\/s).*/\1/p' "$TMP/worker0.log"
    for f in "$TMP"/*.log "$TMP"/*.out; do mv "$f" "$f.$name"; done
}
