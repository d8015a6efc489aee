#!/usr/bin/env python3
"""A stranger on a zshard job's ports (tests/test_strangers.sh, tests/test_multihost.sh).

Hits HOST:PORT the way port scanners, health checks and confused programs do, bounded in
count and time, and only ever on loopback or the tests' namespace addresses:

  empty   N connections that send nothing and close
  junk    random bytes, an HTTP request, a wrong magic, a hello with an oversize length,
          a half-sent hello left hanging, a store request without a hello
  flood   N connections opened and held open for --hold seconds (written to --ready when
          the first half is open, so a test can start a real rank in the middle of it)
  probe   greet the store as rank 1 of --job without a secret, then try to read a key

Prints one line per phase with what happened. It never fails because the target refused
or closed a connection; only a misuse of this script exits non-zero.
"""
import argparse
import ipaddress
import os
import random
import resource
import socket
import struct
import sys
import time


def allowed(host):
    """Loopback, or the private ranges the namespace hosts use: never anyone else's host."""
    addr = ipaddress.ip_address(socket.gethostbyname(host))
    return addr.is_loopback or addr.is_private


def connect(host, port, timeout=2.0):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.settimeout(timeout)
    try:
        s.connect((host, port))
        return s
    except OSError:
        s.close()
        return None


def send_and_close(host, port, payload, wait=5.0):
    """Send payload, then read until the other side closes (or `wait` passes)."""
    s = connect(host, port)
    if s is None:
        return "refused"
    t0, got = time.time(), 0
    try:
        if payload:
            s.sendall(payload)
        s.settimeout(0.2)
        while time.time() - t0 < wait:
            try:
                b = s.recv(4096)
            except socket.timeout:
                continue
            if not b:
                return "closed by it after %d bytes back, %.1f s" % (got, time.time() - t0)
            got += len(b)
        return "still open after %.0f s (%d bytes back)" % (wait, got)
    except OSError as e:
        return "reset (%s) after %d bytes back" % (e.__class__.__name__, got)
    finally:
        s.close()


def empty(host, port, n):
    closed = 0
    for _ in range(n):
        s = connect(host, port)
        if s is not None:
            s.close()
            closed += 1
    print("stranger: %d empty connections opened and closed (%d refused)" % (closed, n - closed))


def junk(host, port, seed):
    rng = random.Random(seed)
    # A client hello: magic, version 2, job length, rank, world, nonce, mac, job.
    hello = b"ZSSc" + struct.pack("<HHII", 2, 65000, 0, 2) + bytes(64)
    tries = [
        ("256 random bytes", bytes(rng.getrandbits(8) for _ in range(256))),
        ("64 KiB random", bytes(rng.getrandbits(8) for _ in range(65536))),
        ("HTTP GET", b"GET / HTTP/1.1\r\nHost: x\r\n\r\n"),
        ("wrong magic", b"ZSSx" + bytes(76)),
        ("oversize job length", hello),
        ("oversize request (no hello)", struct.pack("<BII", 1, 0xFFFFFFFF, 0xFFFFFFFF)),
        ("store SET without a hello", struct.pack("<BII", 1, 3, 1) + b"key" + b"v"),
        ("half a hello", b"ZSSc" + struct.pack("<HH", 2, 5)),
        ("a hello for rank 1 of another job",
         b"ZSSc" + struct.pack("<HHII", 2, 5, 1, 2) + bytes(64) + b"other"),
    ]
    for name, payload in tries:
        print("stranger: %-34s -> %s" % (name, send_and_close(host, port, payload)))


def flood(host, port, n, hold, ready):
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = min(hard, n + 64)
    if soft < want:
        resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
    held, failed, t0 = [], 0, time.time()
    for i in range(n):
        if time.time() - t0 > 30:
            break
        s = connect(host, port, timeout=1.0)
        if s is None:
            failed += 1
        else:
            held.append(s)
        if ready and i == n // 2:
            with open(ready, "w") as f:
                f.write("half\n")
    if ready and not os.path.exists(ready):
        open(ready, "w").close()
    time.sleep(hold)
    alive = 0
    for s in held:
        s.setblocking(False)
        try:
            while s.recv(4096):  # the store's greeting, then its close (or nothing yet)
                pass
        except BlockingIOError:
            alive += 1
        except OSError:
            pass
        s.close()
    print("stranger: flood of %d connections: %d opened, %d refused or timed out, %d still "
          "open after %.0f s" % (n, len(held), failed, alive, hold))


def probe_get(host, port, job, key):
    """Greet as rank 1 of JOB with no secret (a zero mac), then try to read KEY."""
    s = connect(host, port)
    if s is None:
        print("probe: refused (no connection)")
        return
    s.settimeout(3.0)
    try:
        hello = b""
        while len(hello) < 40:
            got = s.recv(40 - len(hello))
            if not got:
                break
            hello += got
        if len(hello) < 40 or hello[:4] != b"ZSSs":
            print("probe: refused (no greeting from the store)")
            return
        j = job.encode()
        s.sendall(b"ZSSc" + struct.pack("<HHII", 2, len(j), 1, 2) + bytes(64) + j)
        ans = s.recv(35 + 512)
        if not ans or ans[0] != 0:
            print("probe: refused (%s)" % (ans[35:].decode(errors="replace") if ans else "closed"))
            return
        print("probe: welcome")
        k = key.encode()
        s.sendall(struct.pack("<BII", 2, len(k), 0) + k)
        hdr = s.recv(9)
        if len(hdr) == 9 and hdr[0] == 0:
            n = struct.unpack("<I", hdr[5:9])[0]
            print("probe: value of %s, %d bytes" % (key, n))
        else:
            print("probe: no value")
    except OSError as e:
        print("probe: %s" % ("no value (timed out)" if isinstance(e, socket.timeout)
                             else "refused (%s)" % e))
    finally:
        s.close()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--empty", type=int, default=0)
    ap.add_argument("--junk", action="store_true")
    ap.add_argument("--flood", type=int, default=0)
    ap.add_argument("--hold", type=float, default=3.0)
    ap.add_argument("--ready", default="")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--probe-get", default="", help="greet as rank 1 of --job, then GET this key")
    ap.add_argument("--job", default="")
    a = ap.parse_args()
    if not allowed(a.host):
        sys.exit("stranger: %s is neither loopback nor a private address" % a.host)
    if a.empty:
        empty(a.host, a.port, min(a.empty, 1000))
    if a.junk:
        junk(a.host, a.port, a.seed)
    if a.probe_get:
        probe_get(a.host, a.port, a.job, a.probe_get)
    if a.flood:
        flood(a.host, a.port, min(a.flood, 5000), min(a.hold, 30), a.ready)


if __name__ == "__main__":
    main()
