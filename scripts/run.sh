#!/usr/bin/env bash
# run.sh RETRYD_BIN - what `make run` does: serve retryd on 127.0.0.1:8080
# (and its SQS endpoint on 127.0.0.1:9324, docs/sqs.md; RETRYD_SQS_LISTEN=""
# turns it off) against RETRYD_REDIS when it is set, otherwise against a
# private redis-server with AOF persistence under ./var/ that lives as long
# as retryd.
set -eu
bin=$1
export RETRYD_SQS_LISTEN=${RETRYD_SQS_LISTEN-127.0.0.1:9324}

if [ -n "${RETRYD_REDIS:-}" ]; then
    exec "$bin"    # retryd reads RETRYD_REDIS (and every other RETRYD_*) itself
fi

source "$(dirname "${BASH_SOURCE[0]}")/lib.sh" # redis_start, stop_pid
port=${RETRYD_EMBEDDED_REDIS_PORT:-6479}
mkdir -p var
trap 'STOP_TIMEOUT=30 stop_pid "${REDIS_PID:-}"' EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
rc=0
redis_start "$port" var --appendonly yes --appendfsync everysec --save '' \
    --maxmemory-policy noeviction || rc=$?
case $rc in
    0) ;;
    2) echo "run: something already answers on port $port; set RETRYD_REDIS=redis://host:port" \
            "to use it, or RETRYD_EMBEDDED_REDIS_PORT to pick another port" >&2
       exit 1 ;;
    *) echo "run: redis-server did not start; see var/redis.log" >&2
       exit 1 ;;
esac
echo "run: embedded Redis on 127.0.0.1:$port (AOF in ./var/); Ctrl-C stops both"

RETRYD_REDIS="redis://127.0.0.1:$port" "$bin" || status=$?
exit "${status:-0}"
