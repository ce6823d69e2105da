#!/usr/bin/env python3
"""memory_pin.py - how much memory clients can make retryd hold (issue 19).

Starts a throwaway redis-server and retryd on free loopback ports, measures
retryd's VmRSS (/proc/PID/status) before and while clients pin memory, and
prints one line per scenario:

  bodies  N connections send a POST with Content-Length 1 MiB and 1 MiB minus
          one byte of body, without a token, to a retryd with
          --auth-token-file (the request never completes: before the fix
          each body was held until the idle timeout).
  list    N connections each ask for a page of 100 messages whose payloads
          are 1 MiB minus 64 bytes of 0x01 (six-fold on the wire as \\u0001)
          and never read the answer.
  claim   the same with a claim of 100 (?count=100).
  sqs     N connections send an unsigned SendMessage (JSON protocol) with
          Content-Length 1 MiB and 1 MiB minus one byte of body to the SQS
          endpoint of a retryd with --sqs-credentials (before the fix each
          body was read and held until the idle timeout; now each gets 403
          MissingAuthenticationToken at its headers).

Usage: bench/memory_pin.py [--bin build/retryd] [--scenario bodies|list|claim|sqs|all]
                           [--conns N] [--hold S] [-- extra retryd flags...]
Only loopback addresses are used; every loop is bounded in count and time.
"""
import argparse
import os
import selectors
import socket
import subprocess
import sys
import tempfile
import time

MiB = 1024 * 1024


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def rss_kb(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def wait_port(port, timeout=10.0):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            time.sleep(0.05)
    raise SystemExit(f"nothing listens on {port}")


def resp(sock, *args):
    """One Redis command over RESP (binary-safe); returns the first reply line."""
    out = [b"*%d\r\n" % len(args)]
    for a in args:
        a = a if isinstance(a, bytes) else str(a).encode()
        out.append(b"$%d\r\n%s\r\n" % (len(a), a))
    sock.sendall(b"".join(out))
    buf = b""
    while b"\r\n" not in buf:
        chunk = sock.recv(65536)
        if not chunk:
            raise SystemExit("redis closed the link")
        buf += chunk
    if buf.startswith(b"-"):
        raise SystemExit("redis: " + buf.decode(errors="replace").strip())
    # An array reply of the enqueue: drain it (small).
    time.sleep(0)
    sock.settimeout(0.05)
    try:
        while sock.recv(65536):
            pass
    except (socket.timeout, BlockingIOError):
        pass
    sock.settimeout(None)
    return buf


def http_get(port, path, token=None):
    s = socket.create_connection(("127.0.0.1", port), timeout=5)
    auth = f"Authorization: Bearer {token}\r\n" if token else ""
    s.sendall(f"GET {path} HTTP/1.1\r\nHost: x\r\n{auth}Connection: close\r\n\r\n".encode())
    data = b""
    while True:
        chunk = s.recv(1 << 20)
        if not chunk:
            break
        data += chunk
    s.close()
    return data.decode(errors="replace")


def metric(port, name, token=None):
    for line in http_get(port, "/metrics", token).splitlines():
        if line.startswith(name + " "):
            return int(float(line.split()[1]))
    return None


class Daemons:
    def __init__(self, binary, extra, token, sqs=False):
        self.tmp = tempfile.mkdtemp(prefix="memory_pin.")
        self.redis_port = free_port()
        self.redis = subprocess.Popen(
            ["redis-server", "--port", str(self.redis_port), "--save", "", "--appendonly", "no",
             "--dir", self.tmp], stdout=subprocess.DEVNULL)
        wait_port(self.redis_port)
        self.port = free_port()
        self.token = token
        args = [binary, "--listen", f"127.0.0.1:{self.port}",
                "--redis", f"redis://127.0.0.1:{self.redis_port}", "--prefix", "pin",
                "--log-level", "error"]
        if token:
            path = os.path.join(self.tmp, "token")
            with open(path, "w") as f:
                f.write(token + "\n")
            args += ["--auth-token-file", path]
        self.sqs_port = None
        if sqs:
            self.sqs_port = free_port()
            path = os.path.join(self.tmp, "sqs-credentials")
            with open(path, "w") as f:
                f.write("AKIDMEMORYPIN s3cretMemoryPin\n")
            args += ["--sqs-listen", f"127.0.0.1:{self.sqs_port}", "--sqs-credentials", path]
        self.retryd = subprocess.Popen(args + extra)
        wait_port(self.port)
        end = time.monotonic() + 10
        while not http_get(self.port, "/readyz", token).startswith("HTTP/1.1 200"):
            if time.monotonic() > end:
                raise SystemExit("retryd never became ready")
            time.sleep(0.05)

    def stop(self):
        for p in (self.retryd, self.redis):
            p.terminate()
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()


def sample_while(pid, seconds, peak):
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        peak = max(peak, rss_kb(pid))
        time.sleep(0.05)
    return peak


def scenario_bodies(binary, conns, hold, extra, sqs=False):
    d = Daemons(binary, extra, token="memory-pin-token", sqs=sqs)
    try:
        base = rss_kb(d.retryd.pid)
        port, refusal = d.port, b"HTTP/1.1 401"
        head = (b"POST /queues/pin/messages HTTP/1.1\r\nHost: x\r\n"
                b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n" % MiB)
        if sqs:
            port, refusal = d.sqs_port, b"HTTP/1.1 403"
            head = (b"POST / HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-amz-json-1.0\r\n"
                    b"X-Amz-Target: AmazonSQS.SendMessage\r\nContent-Length: %d\r\n\r\n" % MiB)
        body_left = {}
        sel = selectors.DefaultSelector()
        socks = []
        for _ in range(conns):
            s = socket.create_connection(("127.0.0.1", port))
            s.sendall(head)
            s.setblocking(False)
            socks.append(s)
            body_left[s] = MiB - 1
            sel.register(s, selectors.EVENT_WRITE)
        chunk = b"a" * 65536
        refused = 0
        peak = base
        deadline = time.monotonic() + 120
        while body_left and time.monotonic() < deadline:
            for key, _ in sel.select(timeout=0.05):
                s = key.fileobj
                try:
                    n = s.send(chunk[:min(len(chunk), body_left[s])])
                    body_left[s] -= n
                    done = body_left[s] == 0
                except (BrokenPipeError, ConnectionResetError):
                    refused += 1
                    done = True
                if done:
                    sel.unregister(s)
                    del body_left[s]
            peak = max(peak, rss_kb(d.retryd.pid))
        peak = sample_while(d.retryd.pid, hold, peak)
        held = rss_kb(d.retryd.pid)
        refusals = "n/a (an API counter)" if sqs else metric(d.port, 'retryd_http_refused_total{reason="unauthorized"}',
                                           d.token)
        answered = 0
        for s in socks:
            s.setblocking(True)
            s.settimeout(0.2)
            try:
                answered += s.recv(64).startswith(refusal)
            except OSError:
                pass
            s.close()
        print(f"{'sqs' if sqs else 'bodies'}: {conns} connections x {MiB - 1} bytes "
              f"{'unsigned to the SQS port' if sqs else 'without a token'}: "
              f"RSS {base / 1024:.0f} MB before, peak {peak / 1024:.0f} MB, "
              f"{held / 1024:.0f} MB after {hold:g} s; answered {refusal[9:].decode()}: "
              f"{answered}, sends cut: "
              f"{refused}; retryd_http_refused_total{{unauthorized}}: {refusals}")
    finally:
        d.stop()


def scenario_readers(binary, conns, hold, extra, kind):
    d = Daemons(binary, extra, token=None)
    try:
        fn = "retryd_v9_enqueue"
        lib = os.path.join(os.path.dirname(binary), "retryd.lua")
        if os.path.exists(lib):
            with open(lib) as f:
                first = f.readline()
            if "name=" in first:
                fn = first.split("name=")[1].split()[0] + "_enqueue"
        r = socket.create_connection(("127.0.0.1", d.redis_port))
        payload = b"\x01" * (MiB - 64)
        # Enough for every connection even at three per answer (the old budget).
        messages = 3 * conns + 3 if kind == "claim" else 10
        for _ in range(messages):
            resp(r, "FCALL", fn, "1", "pin:{pin}", payload, "3", "0", "")
        r.close()
        time.sleep(0.2)
        base = rss_kb(d.retryd.pid)
        path = ("/queues/pin/claim?count=100" if kind == "claim"
                else "/queues/pin/messages?status=pending&limit=100")
        method = "POST" if kind == "claim" else "GET"
        req = (f"{method} {path} HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n").encode()
        socks = []
        for _ in range(conns):
            s = socket.socket()
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            s.connect(("127.0.0.1", d.port))
            s.sendall(req)
            socks.append(s)
        peak = sample_while(d.retryd.pid, hold, base)
        held = rss_kb(d.retryd.pid)
        closed = metric(d.port, "retryd_http_slow_readers_closed_total")
        queued = metric(d.port, "retryd_http_pending_output_bytes")
        for s in socks:
            s.close()
        what = "claim of 100" if kind == "claim" else "page of 100"
        print(f"{kind}: {conns} connections asking for a {what} (payloads {MiB - 64} bytes of "
              f"0x01) and never reading: RSS {base / 1024:.0f} MB before, peak "
              f"{peak / 1024:.0f} MB, {held / 1024:.0f} MB after {hold:g} s; "
              f"slow readers closed: {closed}; output queued: "
              f"{'n/a' if queued is None else f'{queued / MiB:.1f} MiB'}")
    finally:
        d.stop()


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bin", default="build/retryd")
    ap.add_argument("--scenario", default="all", choices=["bodies", "list", "claim", "sqs", "all"])
    ap.add_argument("--conns", type=int, default=0,
                    help="connections (default 600 for bodies and sqs, 40 for list and claim)")
    ap.add_argument("--hold", type=float, default=5.0, help="seconds to keep sampling")
    ap.add_argument("extra", nargs="*", help="more retryd flags (after --)")
    a = ap.parse_args()
    todo = ["bodies", "list", "claim", "sqs"] if a.scenario == "all" else [a.scenario]
    for sc in todo:
        if sc in ("bodies", "sqs"):
            scenario_bodies(a.bin, a.conns or 600, a.hold, a.extra, sqs=sc == "sqs")
        else:
            scenario_readers(a.bin, a.conns or 40, a.hold, a.extra, sc)
    return 0


if __name__ == "__main__":
    sys.exit(main())
