#!/usr/bin/env bash
# cluster.sh start DIR [MASTERS] [REPLICAS_PER_MASTER] - starts a throwaway
#   Redis Cluster on free loopback ports (data and logs in DIR), prints its
#   seeds as "host:port,host:port,..." on stdout and the pids in DIR/pids.
# cluster.sh stop DIR - stops every server started for DIR and removes it.
# With CLUSTER_TLS_DIR (holding ca.crt, server.crt, server.key) every node
# also listens with TLS (tls-cluster and tls-replication on) and the seeds
# printed are the TLS ports; the plain ports stay open for the set-up (in
# DIR/plain_ports) and are what CLUSTER SLOTS shows a plain client.
# Used by the cluster test suite and by make bench; redis-server and
# redis-cli only.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh" # port_open, redis_start, stop_pid

# Client ports 20000-29999, so the cluster bus ports (+10000) never collide
# with another node's client port; ports already taken this run are skipped.
taken=" "
free_cluster_port() {
    local p
    for _ in $(seq 1 200); do
        p=$((20000 + RANDOM % 10000))
        case "$taken" in *" $p "*) continue ;; esac
        if ! port_open "$p" && ! port_open $((p + 10000)); then
            taken="$taken$p "
            echo "$p"
            return
        fi
    done
    echo "cluster.sh: no free port" >&2
    return 1
}

# Starts one node; returns non-zero when it does not answer.
start_node() {
    local dir=$1 port=$2 tls_port=${3:-}
    local -a tls=()
    if [ -n "$tls_port" ]; then
        local t=$CLUSTER_TLS_DIR
        tls=(--tls-port "$tls_port" --cluster-port $((port + 10000)) --tls-cluster yes
             --tls-replication yes --tls-cert-file "$t/server.crt" --tls-key-file "$t/server.key"
             --tls-ca-cert-file "$t/ca.crt" --tls-auth-clients optional)
    fi
    mkdir -p "$dir/$port"
    redis_start "$port" "$dir/$port" --cluster-enabled yes --cluster-config-file nodes.conf \
        --cluster-node-timeout 2000 --appendonly no --save '' ${tls[@]+"${tls[@]}"} || return 1
    echo "$REDIS_PID" >> "$dir/pids"
}

start() {
    local dir=$1 masters=${2:-3} replicas=${3:-1}
    local total=$((masters * (1 + replicas))) nodes=() seeds=() port tls_port=""
    mkdir -p "$dir"
    : > "$dir/pids"
    for i in $(seq 1 "$total"); do
        local ok=0
        for _ in 1 2 3; do
            port=$(free_cluster_port)
            taken="$taken$port "
            if [ -n "${CLUSTER_TLS_DIR:-}" ]; then
                tls_port=$(free_cluster_port)
                taken="$taken$tls_port "
            fi
            if start_node "$dir" "$port" "$tls_port"; then ok=1; break; fi
        done
        [ "$ok" -eq 1 ] || { echo "cluster.sh: node $i would not start" >&2; return 1; }
        nodes+=("127.0.0.1:$port")
        seeds+=("127.0.0.1:${tls_port:-$port}")
    done
    echo "${nodes[*]}" > "$dir/plain_ports"
    redis-cli --cluster create "${nodes[@]}" --cluster-replicas "$replicas" --cluster-yes \
        > "$dir/create.log" 2>&1 || { cat "$dir/create.log" >&2; return 1; }
    # Wait until every node agrees the cluster is up.
    for n in "${nodes[@]}"; do
        for _ in $(seq 1 200); do
            redis-cli -p "${n##*:}" cluster info 2>/dev/null | grep -q 'cluster_state:ok' && break
            sleep 0.05
        done
    done
    (IFS=,; echo "${seeds[*]}")
}

stop() {
    local dir=$1
    # shellcheck disable=SC2046 # one pid per line
    [ -f "$dir/pids" ] && stop_pid $(cat "$dir/pids")
    rm -rf "$dir"
}

case "${1:-}" in
    start) shift; start "$@" ;;
    stop) shift; stop "$@" ;;
    *) echo "usage: cluster.sh start DIR [MASTERS] [REPLICAS] | stop DIR" >&2; exit 2 ;;
esac
