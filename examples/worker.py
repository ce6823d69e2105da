#!/usr/bin/env python3
"""worker.py - a complete retryd worker, Python 3 standard library only.

    RETRYD_URL=http://127.0.0.1:8080 QUEUE=jobs python3 worker.py

Loop: POST /queues/{q}/claim with the settlements of what it finished and a long-poll
(docs/reference.md "Settle and claim": settle and take the next in one atomic call). Jobs follow a tiny convention:
the payload is JSON {"work": "ok" | "slow" | "permanent"}; "slow" works longer than a
lease and extends it meanwhile, "permanent" fails with retryable: false (dead at once, no
retries); anything that raises is a retryable failure (backoff, then dead). On SIGTERM
or SIGINT it takes nothing new, finishes what it holds and settles it, then exits 0. A
503 (Redis unreachable) or a refused connection backs off (Retry-After, doubling to 30 s).

Environment: RETRYD_URL, QUEUE (jobs), RETRYD_TOKEN (bearer, when the daemon has
--auth-token-file), WORKER (a name: host/pid), LEASE_SECONDS (30), WAIT_SECONDS (20),
SLOW_SECONDS (how long a "slow" job works, 3 x LEASE_SECONDS).
"""
import json, os, signal, socket, sys, time, urllib.error, urllib.parse, urllib.request

URL = os.environ.get("RETRYD_URL", "http://127.0.0.1:8080").rstrip("/")
QUEUE = os.environ.get("QUEUE", "jobs")
TOKEN = os.environ.get("RETRYD_TOKEN", "")
NAME = os.environ.get("WORKER", "%s/%d" % (socket.gethostname(), os.getpid()))
LEASE = int(os.environ.get("LEASE_SECONDS", "30"))
WAIT = int(os.environ.get("WAIT_SECONDS", "20"))
SLOW = float(os.environ.get("SLOW_SECONDS", str(3 * LEASE)))
Q = "%s/queues/%s" % (URL, urllib.parse.quote(QUEUE, safe=""))
stopping = False


def log(*args):
    print("worker.py[%s]:" % NAME, *args, file=sys.stderr, flush=True)


def on_signal(signum, frame):
    global stopping
    stopping = True  # the call in progress finishes; nothing new is claimed


class Unavailable(Exception):
    def __init__(self, why, retry_after):
        super().__init__(why)
        self.retry_after = retry_after


def call(path, body):
    """POST body to path: (status, JSON answer or None). 503 or no connection: Unavailable."""
    req = urllib.request.Request(Q + path, data=json.dumps(body).encode(), method="POST",
                                 headers={"Content-Type": "application/json"})
    if TOKEN:
        req.add_header("Authorization", "Bearer " + TOKEN)
    try:
        with urllib.request.urlopen(req, timeout=WAIT + 30) as resp:
            data = resp.read()
            return resp.status, json.loads(data) if data else None
    except urllib.error.HTTPError as e:
        data = e.read()
        if e.code == 503:
            raise Unavailable(data.decode(errors="replace"), int(e.headers.get("Retry-After") or 1))
        return e.code, json.loads(data) if data else None
    except (urllib.error.URLError, OSError) as e:
        raise Unavailable(str(e), 1)


def extend(msg):
    """Extends msg's lease; False when the lease is lost (it expired and was taken)."""
    try:
        status, _ = call("/messages/%d/extend" % msg["id"],
                         {"lease_token": msg["lease_token"], "lease_seconds": LEASE})
        return status == 200
    except Unavailable:
        return True  # the lease may still hold; the next extend tries again


def work(msg):
    """Does the job; returns its settlement {id, lease_token, outcome, ...} or None."""
    s = {"id": msg["id"], "lease_token": msg["lease_token"], "outcome": "succeeded"}
    try:
        kind = json.loads(msg["payload"]).get("work")
    except (ValueError, AttributeError):
        kind = None
    try:
        if kind == "slow":
            deadline, renew = time.monotonic() + SLOW, time.monotonic() + LEASE / 2
            while time.monotonic() < deadline:  # a job that outlives its lease extends it
                time.sleep(min(0.2, max(0, deadline - time.monotonic())))
                if time.monotonic() >= renew:
                    if not extend(msg):
                        log("lost the lease of", msg["id"], "- dropping it")
                        return None
                    renew = time.monotonic() + LEASE / 2
        elif kind != "ok":  # a permanent error: no retry will help, dead at once
            s.update(outcome="failed", retryable=False, error="permanent: cannot do %r" % kind)
    except Exception as e:  # anything else is worth a retry (backoff, then dead)
        s.update(outcome="failed", error="%s: %s" % (type(e).__name__, e))
    return s


def settle_alone(s):
    """Settles s with its own route (on the way out, when no claim follows)."""
    body = {k: v for k, v in s.items() if k not in ("id", "outcome")}
    verb = "succeed" if s["outcome"] == "succeeded" else "fail"
    while True:
        try:
            status, answer = call("/messages/%d/%s" % (s["id"], verb), body)
            log("settled", s["id"], "on the way out:", status, (answer or {}).get("status"))
            return
        except Unavailable as e:
            log("503 while settling", s["id"], "- retrying in", e.retry_after, "s")
            time.sleep(e.retry_after)


def main():
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    done, backoff = [], 1
    log("working on", Q)
    while not stopping:
        # `worker` names this worker; a retryd that does not record it yet ignores it
        # (unknown fields are ignored).
        body = {"worker": NAME, "count": 1, "lease_seconds": LEASE, "wait_seconds": WAIT}
        if done:
            body["settle"] = done
        try:
            status, answer = call("/claim", body)
        except Unavailable as e:  # nothing was done (or, outcome-unknown, maybe): try again
            wait = max(e.retry_after, backoff)
            log("retryd unavailable, backing off", wait, "s:", str(e)[:120])
            time.sleep(wait)
            backoff = min(backoff * 2, 30)
            continue
        backoff = 1
        if status not in (200, 204):
            log("claim refused:", status, answer)
            return 1
        for item in (answer or {}).get("settled", []):
            if item["status"] not in ("succeeded", "pending", "dead"):
                log("settling", item["id"], "answered", item["status"])
        done = [s for s in (work(m) for m in (answer or {}).get("messages", [])) if s]
    for s in done:
        settle_alone(s)
    log("stopped")
    return 0


if __name__ == "__main__":
    sys.exit(main())
