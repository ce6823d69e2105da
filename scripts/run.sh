#!/bin/sh
# run.sh RETRYD_BIN - what `make run` does: serve retryd on 127.0.0.1:8080
# against RETRYD_REDIS when it is set, otherwise against a private
# redis-server with AOF persistence under ./var/ that lives as long as retryd.
set -eu
bin=$1

if [ -n "${RETRYD_REDIS:-}" ]; then
    exec "$bin"    # retryd reads RETRYD_REDIS (and every other RETRYD_*) itself
fi

port=${RETRYD_EMBEDDED_REDIS_PORT:-6479}
mkdir -p var
if redis-cli -p "$port" ping >/dev/null 2>&1; then
    echo "run: something already answers on port $port; set RETRYD_REDIS=redis://host:port" \
         "to use it, or RETRYD_EMBEDDED_REDIS_PORT to pick another port" >&2
    exit 1
fi

redis-server --port "$port" --bind 127.0.0.1 --dir "$(pwd)/var" \
    --appendonly yes --appendfsync everysec --save '' \
    --maxmemory-policy noeviction --logfile "$(pwd)/var/redis.log" &
redis_pid=$!
trap 'kill "$redis_pid" 2>/dev/null; wait "$redis_pid" 2>/dev/null' EXIT INT TERM

tries=0
until redis-cli -p "$port" ping >/dev/null 2>&1; do
    tries=$((tries + 1))
    if [ "$tries" -gt 100 ] || ! kill -0 "$redis_pid" 2>/dev/null; then
        echo "run: redis-server did not start; see var/redis.log" >&2
        exit 1
    fi
    sleep 0.05
done
echo "run: embedded Redis on 127.0.0.1:$port (AOF in ./var/); Ctrl-C stops both"

RETRYD_REDIS="redis://127.0.0.1:$port" "$bin" || status=$?
exit "${status:-0}"
