#!/usr/bin/env python3
"""longpoll_names.py - enqueue cost after many long-poll names (issue 19 item 6).

Starts its own redis-server and retryd on free loopback ports, parks N
one-second long-poll claims on N distinct queue names (in waves of at most
--wave at once, under retryd's --max-connections), waits until all are
answered (204), then times E enqueues sent one after another on one
keep-alive connection, and reports how many wake channels Redis still had
subscribed at each step.

    python3 bench/longpoll_names.py [--bin build/retryd] [--names 26000]
                                    [--enqueues 5000] [--wave 2000]

Output, one key=value line per figure:
    names=N wave=W long_polls_seconds=S
    subscribed_after_long_polls=C
    enqueues=E enqueue_seconds=S
    subscribed_after_enqueues=C
    subscribed_after_wait=C wait_seconds=S   (polled until 0, at most 40 s)
Only loopback addresses are used; every loop is bounded.
"""
import argparse
import asyncio
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port, deadline_s=10):
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return
        except OSError:
            time.sleep(0.05)
    sys.exit(f"nothing listens on {port} after {deadline_s} s")


def redis_cli(port, *args):
    out = subprocess.run(["redis-cli", "-p", str(port), *args], capture_output=True, text=True,
                         check=True)
    return out.stdout


def subscribed(port, prefix):
    return len([l for l in redis_cli(port, "PUBSUB", "CHANNELS", f"{prefix}:*").split("\n") if l])


async def read_response(reader):
    head = await reader.readuntil(b"\r\n\r\n")
    status = int(head.split(b" ", 2)[1])
    length = 0
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            length = int(line.split(b":", 1)[1])
    if length:
        await reader.readexactly(length)
    return status


async def long_poll(port, q):
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    body = b'{"wait_seconds":1}'
    writer.write(b"POST /queues/%s/claim HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                 b"Content-Length: %d\r\n\r\n%s" % (q.encode(), len(body), body))
    status = await asyncio.wait_for(read_response(reader), 30)
    writer.close()
    if status != 204:
        sys.exit(f"long-poll on {q} answered {status}, want 204")


async def long_polls(port, names, wave):
    for at in range(0, len(names), wave):
        await asyncio.gather(*(long_poll(port, q) for q in names[at:at + wave]))


def enqueues(port, n):
    s = socket.create_connection(("127.0.0.1", port))
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    f = s.makefile("rb")
    body = b'{"payload":"x"}'
    req = (b"POST /queues/lpname-enqueu/messages HTTP/1.1\r\nHost: x\r\n"
           b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
    t0 = time.monotonic()
    for _ in range(n):
        s.sendall(req)
        status = int(f.readline().split(b" ", 2)[1])
        length = 0
        while True:
            line = f.readline()
            if line in (b"\r\n", b""):
                break
            if line.lower().startswith(b"content-length:"):
                length = int(line.split(b":", 1)[1])
        f.read(length)
        if status != 201:
            sys.exit(f"enqueue answered {status}")
    took = time.monotonic() - t0
    s.close()
    return took


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default=os.path.join(os.environ.get("BUILD", "build"), "retryd"))
    ap.add_argument("--names", type=int, default=26000)
    ap.add_argument("--enqueues", type=int, default=5000)
    ap.add_argument("--wave", type=int, default=2000)
    a = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="retryd-lpnames.")
    rport, hport, prefix = free_port(), free_port(), "lpn"
    procs = []
    try:
        procs.append(subprocess.Popen(["redis-server", "--port", str(rport), "--save", "",
                                       "--appendonly", "no", "--dir", tmp],
                                      stdout=subprocess.DEVNULL))
        wait_port(rport)
        log = open(os.path.join(tmp, "retryd.log"), "w")
        procs.append(subprocess.Popen([a.bin, "--listen", f"127.0.0.1:{hport}", "--redis",
                                       f"redis://127.0.0.1:{rport}", "--prefix", prefix,
                                       "--log-level", "error", "--max-connections", "8192"],
                                      stdout=log, stderr=log))
        wait_port(hport)
        names = [f"lpname-{i:06d}" for i in range(a.names)]
        t0 = time.monotonic()
        asyncio.run(long_polls(hport, names, a.wave))
        print(f"names={a.names} wave={a.wave} long_polls_seconds={time.monotonic() - t0:.2f}")
        print(f"subscribed_after_long_polls={subscribed(rport, prefix)}")
        took = enqueues(hport, a.enqueues)
        print(f"enqueues={a.enqueues} enqueue_seconds={took:.2f}")
        print(f"subscribed_after_enqueues={subscribed(rport, prefix)}")
        t0 = time.monotonic()
        left = subscribed(rport, prefix)
        while left and time.monotonic() - t0 < 40:
            time.sleep(0.5)
            left = subscribed(rport, prefix)
        print(f"subscribed_after_wait={left} wait_seconds={time.monotonic() - t0:.1f}")
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
