#!/usr/bin/env python3
"""shared_redis_load.py - another client's enqueue latency while cheap requests
load the shared Redis (issue 19 item 9).

Starts its own redis-server and two retryd instances, A and B, on free
loopback ports (same prefix, --max-body 2 MiB so a 1 MiB error fits in a
fail body). A prober sends enqueues through B (another instance) and through A (the
loaded one), one due every 10 ms (open loop: latency counts from when each
was due), and reports their p50 and p99, in three phases of --seconds each:

  baseline  nothing else runs;
  rules     one client loops enqueue, claim, fail on a queue with 20
            dead_letter_rules of 255-byte needles, each fail carrying a
            1 MiB error that shares the needles' first 254 bytes (the worst
            case of a plain substring search) through A;
  scrapes   1000 queues exist; eight clients each loop GET /metrics and
            GET /queues?limit=1000 through A.

    python3 bench/shared_redis_load.py [--bin build/retryd] [--seconds 10]

Output, one key=value line per phase and instance:
    phase=P via=B enqueues=N p50_ms=X p99_ms=Y load_requests=M
Only loopback addresses are used; every loop stops after --seconds.
"""
import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_ready(port, deadline_s=15):
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        try:
            c = Conn(port)
            status, _ = c.request("GET", "/readyz")
            c.close()
            if status == 200:
                return
        except OSError:
            pass
        time.sleep(0.1)
    sys.exit(f"retryd on {port} not ready after {deadline_s} s")


class Conn:
    """One keep-alive HTTP/1.1 connection, one request at a time."""

    def __init__(self, port):
        self.s = socket.create_connection(("127.0.0.1", port), timeout=60)
        self.s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.f = self.s.makefile("rb")

    def request(self, method, path, body=None):
        data = body.encode() if isinstance(body, str) else (body or b"")
        head = f"{method} {path} HTTP/1.1\r\nHost: x\r\n"
        if body is not None:
            head += f"Content-Type: application/json\r\nContent-Length: {len(data)}\r\n"
        self.s.sendall(head.encode() + b"\r\n" + data)
        status = int(self.f.readline().split(b" ", 2)[1])
        length = 0
        while True:
            line = self.f.readline()
            if line in (b"\r\n", b""):
                break
            if line.lower().startswith(b"content-length:"):
                length = int(line.split(b":", 1)[1])
        return status, self.f.read(length) if length else b""

    def close(self):
        self.s.close()


def expect(status, body, want, what):
    if status != want:
        sys.exit(f"{what}: answered {status}, want {want}: {body[:200]!r}")


PROBE_INTERVAL_S = 0.01


def probe(port, stop, out):
    """Open loop: enqueue i is due at start + i * 10 ms; its latency runs from
    when it was due (a probe held up delays the next ones, and they count
    that wait), so the percentiles are what a client arriving at any moment
    sees, not only the ones lucky enough to be sent between two stalls."""
    c = Conn(port)
    lat = []
    due = time.perf_counter()
    while not stop.is_set():
        now = time.perf_counter()
        if now < due:
            time.sleep(due - now)
        status, body = c.request("POST", "/queues/probe/messages", '{"payload":"p"}')
        lat.append(time.perf_counter() - due)
        expect(status, body, 201, "probe enqueue")
        due += PROBE_INTERVAL_S
    c.close()
    out.extend(lat)


def rules_loop(port, stop, count):
    c = Conn(port)
    err = "a" * (1024 * 1024)
    fail = json.dumps({"error": err})
    while not stop.is_set():
        expect(*c.request("POST", "/queues/rules/messages", '{"payload":"r"}'), 201, "enqueue")
        status, body = c.request("POST", "/queues/rules/claim", "{}")
        expect(status, body, 200, "claim")
        m = json.loads(body)
        status, body = c.request("POST", f"/queues/rules/messages/{m['id']}/fail",
                                 json.dumps({"error": err, "lease_token": m["lease_token"]})
                                 if "lease_token" in m else fail)
        expect(status, body, 200, "fail")
        count[0] += 3
    c.close()


def scrape_loop(port, stop, count):
    c = Conn(port)
    while not stop.is_set():
        expect(*c.request("GET", "/metrics"), 200, "/metrics")
        expect(*c.request("GET", "/queues?limit=1000"), 200, "/queues")
        count[0] += 2
    c.close()


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(len(xs) * p))] * 1000 if xs else float("nan")


def phase(name, ports, seconds, loads):
    stop = threading.Event()
    count = [0]
    threads = [threading.Thread(target=fn, args=(ports["A"], stop, count)) for fn in loads]
    for t in threads:
        t.start()
    time.sleep(0.5 if loads else 0)  # let the load start
    results = {}
    probes = []
    for via in ("B", "A"):
        results[via] = []
        probes.append(threading.Thread(target=probe, args=(ports[via], stop, results[via])))
    for t in probes:
        t.start()
    time.sleep(seconds)
    stop.set()
    for t in probes + threads:
        t.join()
    for via in ("B", "A"):
        lat = results[via]
        print(f"phase={name} via={via} enqueues={len(lat)} p50_ms={pct(lat, 0.5):.2f} "
              f"p99_ms={pct(lat, 0.99):.2f} load_requests={count[0]}", flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default=os.path.join(os.environ.get("BUILD", "build"), "retryd"))
    ap.add_argument("--seconds", type=float, default=10)
    ap.add_argument("--phases", default="baseline,rules,scrapes")
    a = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="retryd-shared.")
    rport = free_port()
    ports = {"A": free_port(), "B": free_port()}
    procs = []
    try:
        procs.append(subprocess.Popen(["redis-server", "--port", str(rport), "--save", "",
                                       "--appendonly", "no", "--dir", tmp],
                                      stdout=subprocess.DEVNULL))
        time.sleep(0.3)
        for name, port in ports.items():
            log = open(os.path.join(tmp, f"retryd-{name}.log"), "w")
            procs.append(subprocess.Popen([a.bin, "--listen", f"127.0.0.1:{port}", "--redis",
                                           f"redis://127.0.0.1:{rport}", "--prefix", "shared",
                                           "--log-level", "error", "--max-body", "2097152"],
                                          stdout=log, stderr=log))
        for port in ports.values():
            wait_ready(port)
        c = Conn(ports["A"])
        rules = [{"error_contains": "a" * 254 + "0123456789ABCDEFGHIJ"[i], "action": "dead"}
                 for i in range(20)]
        expect(*c.request("PUT", "/queues/rules/policy",
                          json.dumps({"max_retries": 1, "dead_letter_rules": rules})), 200,
               "PUT policy")
        for i in range(1000):
            expect(*c.request("POST", f"/queues/many-{i:04d}/messages", '{"payload":"m"}'), 201,
                   "enqueue")
        c.close()
        want = a.phases.split(",")
        if "baseline" in want:
            phase("baseline", ports, a.seconds, [])
        if "rules" in want:
            phase("rules", ports, a.seconds, [rules_loop])
        if "scrapes" in want:
            phase("scrapes", ports, a.seconds, [scrape_loop] * 8)
    finally:
        for p in reversed(procs):
            p.terminate()
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
