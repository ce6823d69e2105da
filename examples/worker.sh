#!/usr/bin/env bash
# worker.sh - a complete retryd worker in bash, with curl and jq.
#
#   RETRYD_URL=http://127.0.0.1:8080 QUEUE=jobs bash worker.sh
#
# Loop: POST /queues/{q}/claim with the settlements of what it finished and a
# long-poll (docs/reference.md "Settle and claim": settle and take the next in one atomic call). Jobs follow
# a tiny convention: the payload is JSON {"work": "ok" | "slow" | "permanent"};
# "slow" works longer than a lease and extends it meanwhile, "permanent" fails
# with retryable: false (dead at once, no retries); a job that is not JSON fails
# too, retryably (backoff, then dead). On SIGTERM or SIGINT it takes nothing
# new, finishes what it holds and settles it, then exits 0. A 503 (Redis
# unreachable) or a refused connection backs off (Retry-After, doubling to 30 s).
#
# Environment: RETRYD_URL, QUEUE (jobs), RETRYD_TOKEN (bearer, when the daemon
# has --auth-token-file), WORKER (a name: host/pid), LEASE_SECONDS (30),
# WAIT_SECONDS (20), SLOW_SECONDS (how long a "slow" job works, 3 x LEASE_SECONDS).
set -u

URL=${RETRYD_URL:-http://127.0.0.1:8080}
URL=${URL%/}
QUEUE=${QUEUE:-jobs}
NAME=${WORKER:-$(hostname)/$$}
LEASE=${LEASE_SECONDS:-30}
WAIT=${WAIT_SECONDS:-20}
SLOW=${SLOW_SECONDS:-$((3 * LEASE))}
Q="$URL/queues/$(jq -rn --arg q "$QUEUE" '$q | @uri')"
TMP=$(mktemp -d) || exit 1
trap 'rm -rf "$TMP"' EXIT
stopping=0
# bash runs the trap once the command in progress (a curl, a sleep) is done:
# that call finishes, nothing new is claimed.
trap 'stopping=1' TERM INT

log() { echo "worker.sh[$NAME]: $*" >&2; }

# call PATH JSON: POSTs JSON to $Q/PATH; sets STATUS and ANSWER. Returns 1 when
# retryd is unavailable (503, or no connection), with RETRY_AFTER set.
call() {
    local -a auth=()
    [ -n "${RETRYD_TOKEN:-}" ] && auth=(-H "Authorization: Bearer $RETRYD_TOKEN")
    STATUS=$(curl -s -o "$TMP/body" -D "$TMP/head" -w '%{http_code}' -m $((WAIT + 30)) \
        -X POST -H 'Content-Type: application/json' "${auth[@]}" --data "$2" "$Q$1") || STATUS=000
    ANSWER=$(cat "$TMP/body" 2>/dev/null)
    RETRY_AFTER=$(sed -n 's/^[Rr]etry-[Aa]fter: *\([0-9]*\).*/\1/p' "$TMP/head" 2>/dev/null)
    RETRY_AFTER=${RETRY_AFTER:-1}
    [ "$STATUS" != 503 ] && [ "$STATUS" != 000 ]
}

# now_ms: the wall clock in ms (bash 5's EPOCHREALTIME; loop counts drift
# when the machine is busy).
now_ms() { local t=${EPOCHREALTIME/[.,]/}; echo $((t / 1000)); }

# extend MSG: extends its lease; 1 when the lease is lost (expired and taken).
extend() {
    call "/messages/$(jq .id <<<"$1")/extend" \
        "$(jq -c --argjson s "$LEASE" '{lease_token, lease_seconds: $s}' <<<"$1")" || return 0
    [ "$STATUS" = 200 ]
}

# work MSG: does the job; prints its settlement {id, lease_token, outcome, ...}
# (nothing when the lease was lost).
work() {
    local msg=$1 kind ms renew
    local s
    s=$(jq -c '{id, lease_token, outcome: "succeeded"}' <<<"$msg")
    if ! kind=$(jq -r '.payload | fromjson | .work // "" | tostring' <<<"$msg" 2>/dev/null); then
        jq -c '. + {outcome: "failed", error: "payload is not JSON"}' <<<"$s"
        return
    fi
    case $kind in
        ok) ;;
        slow) # a job that outlives its lease extends it at each half-lease
            ms=$(now_ms)
            local until=$((ms + SLOW * 1000))
            renew=$((ms + LEASE * 500))
            while ((ms < until)); do
                sleep 0.2
                ms=$(now_ms)
                if ((ms >= renew)); then
                    extend "$msg" || { log "lost the lease of $(jq .id <<<"$msg") - dropping it"; return; }
                    renew=$((ms + LEASE * 500))
                fi
            done ;;
        *) # a permanent error: no retry will help, dead at once
            s=$(jq -c --arg k "$kind" '. + {outcome: "failed", retryable: false, error: "permanent: cannot do \($k)"}' <<<"$s") ;;
    esac
    printf '%s\n' "$s"
}

# settle_alone SETTLEMENT: settles it with its own route (on the way out,
# when no claim follows).
settle_alone() {
    local id verb=fail
    id=$(jq .id <<<"$1")
    [ "$(jq -r .outcome <<<"$1")" = succeeded ] && verb=succeed
    until call "/messages/$id/$verb" "$(jq -c 'del(.id, .outcome)' <<<"$1")"; do
        log "503 while settling $id - retrying in $RETRY_AFTER s"
        sleep "$RETRY_AFTER"
    done
    log "settled $id on the way out: $STATUS $(jq -r '.status // empty' <<<"$ANSWER")"
}

done_list='[]'
backoff=1
log "working on $Q"
while [ "$stopping" = 0 ]; do
    # `worker` names this worker; a retryd that does not record it yet ignores
    # it (unknown fields are ignored).
    body=$(jq -cn --arg w "$NAME" --argjson l "$LEASE" --argjson t "$WAIT" --argjson d "$done_list" \
        '{worker: $w, count: 1, lease_seconds: $l, wait_seconds: $t} + (if $d == [] then {} else {settle: $d} end)')
    if ! call /claim "$body"; then # nothing was done (or, outcome-unknown, maybe): try again
        wait=$((RETRY_AFTER > backoff ? RETRY_AFTER : backoff))
        log "retryd unavailable ($STATUS), backing off $wait s: ${ANSWER:0:120}"
        sleep "$wait"
        backoff=$((backoff * 2 > 30 ? 30 : backoff * 2))
        continue
    fi
    backoff=1
    case $STATUS in
        200 | 204) ;;
        *) log "claim refused: $STATUS $ANSWER"; exit 1 ;;
    esac
    [ "$STATUS" = 204 ] && ANSWER='{}'
    jq -r '.settled[]? | select(.status | IN("succeeded", "pending", "dead") | not)
           | "settling \(.id) answered \(.status)"' <<<"$ANSWER" | while read -r line; do log "$line"; done
    done_list='[]'
    while read -r m; do
        [ -n "$m" ] || continue
        s=$(work "$m")
        [ -n "$s" ] && done_list=$(jq -c --argjson s "$s" '. + [$s]' <<<"$done_list")
    done < <(jq -c '.messages[]?' <<<"$ANSWER")
done
while read -r s; do
    [ -n "$s" ] && settle_alone "$s"
done < <(jq -c '.[]' <<<"$done_list")
log "stopped"
exit 0
