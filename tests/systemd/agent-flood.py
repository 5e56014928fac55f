#!/usr/bin/env python3
"""Connection floods against the packaged agent, for scripts/test.d/systemd-boot.sh (step 4b).

    agent-flood.py PORT MAX_CONNECTIONS MAX_PER_PEER HEADER_TIMEOUT IDLE_TIMEOUT AGENT_PID RESERVED

Runs in the booted root (its python3) against the agent on 127.0.0.1:PORT, with the caps and
timeouts of agent/src/limits.rs. One keep-alive connection (from 127.0.0.1, opened first, as
the coordinator's are) must be answered with `/1/report/all` through all of it:

 1. oversized bodies (`POST /1/check` and `POST /1/repair` beyond their limits, declared and
    chunked) are refused with 413, an oversized header with 431 (or a close);
 2. MAX_PER_PEER + 16 idle connections from one address: the 16 beyond the per-peer cap are
    closed at once;
 3. idle connections from further addresses until the total cap less the RESERVED slots only
    the cluster's own callers may take is reached, and 32 more: those beyond it are closed at
    once, and so is a new connection from 127.0.0.1 (not a cluster address here); the agent's open
    descriptors (/proc/AGENT_PID/fd) stay below its soft limit (/proc/AGENT_PID/limits);
 4. slow-loris: 16 new connections send a request header one byte a second, and a request
    body stalls: the agent closes them after HEADER_TIMEOUT (408 for the body);
 5. the agent closes every idle flood connection by itself (they never sent a byte: at the
    header timeout, at the latest at IDLE_TIMEOUT), and so is a keep-alive connection that
    made one request and sends no other; then a new connection from 127.0.0.1 is answered.

Every wait is bounded; prints one JSON line of what it measured; exits 1 on the first failure.
"""

import http.client
import json
import os
import resource
import selectors
import socket
import sys
import threading
import time

PORT = int(sys.argv[1])
MAX_CONNECTIONS = int(sys.argv[2])
MAX_PER_PEER = int(sys.argv[3])
HEADER_TIMEOUT = float(sys.argv[4])
IDLE_TIMEOUT = float(sys.argv[5])
AGENT_PID = int(sys.argv[6])
RESERVED = int(sys.argv[7])
# The slots any caller may take: the reserved ones are the master candidates' and the master's.
OPEN_TO_ALL = MAX_CONNECTIONS - RESERVED
STARTED = time.monotonic()
measured = {}


def fail(message):
    print(f"agent-flood: FAIL after {time.monotonic() - STARTED:.1f} s: {message}", file=sys.stderr)
    sys.exit(1)


def connect(source):
    sock = socket.create_connection(("127.0.0.1", PORT), timeout=5, source_address=(source, 0))
    sock.setblocking(False)
    return sock


def closed_by_agent(socks, within):
    """The sockets of `socks` that the agent closed (EOF or reset) within `within` seconds."""
    selector = selectors.DefaultSelector()
    for sock in socks:
        selector.register(sock, selectors.EVENT_READ)
    closed = set()
    deadline = time.monotonic() + within
    while len(closed) < len(socks):
        left = deadline - time.monotonic()
        if left <= 0:
            break
        for key, _ in selector.select(timeout=left):
            try:
                data = key.fileobj.recv(65536)
            except (ConnectionResetError, BrokenPipeError):
                data = b""
            except BlockingIOError:
                continue
            if not data:
                closed.add(key.fileobj)
                selector.unregister(key.fileobj)
    selector.close()
    return closed


keeper = http.client.HTTPConnection("127.0.0.1", PORT, timeout=10, source_address=("127.0.0.1", 0))
keeper_requests = 0


def report_all(what):
    """`GET /1/report/all` on the keep-alive connection: 200 and mond's JSON list."""
    global keeper_requests
    try:
        keeper.request("GET", "/1/report/all")
        response = keeper.getresponse()
        body = response.read()
    except (OSError, http.client.HTTPException) as error:
        fail(f"/1/report/all on the kept connection failed {what}: {error!r}")
    if response.status != 200:
        fail(f"/1/report/all answered {response.status} {what}: {body[:200]!r}")
    try:
        reports = json.loads(body)
    except ValueError:
        fail(f"/1/report/all is not JSON {what}: {body[:200]!r}")
    if not isinstance(reports, list) or not reports:
        fail(f"/1/report/all is not a list of reports {what}: {body[:200]!r}")
    keeper_requests += 1


def send_raw(source, data, wait=HEADER_TIMEOUT + 5):
    """Sends `data` on a new connection; the status line the agent answers, or None if it
    closed without one."""
    sock = socket.create_connection(("127.0.0.1", PORT), timeout=wait, source_address=(source, 0))
    try:
        for start in range(0, len(data), 65536):
            sock.sendall(data[start:start + 65536])
    except (BrokenPipeError, ConnectionResetError):
        pass  # refused before the end: its answer may still be there
    answer = b""
    try:
        while b"\r\n" not in answer:
            chunk = sock.recv(4096)
            if not chunk:
                break
            answer += chunk
    except (ConnectionResetError, socket.timeout):
        pass
    sock.close()
    return answer.split(b"\r\n", 1)[0].decode(errors="replace") or None


def expect_status(what, status_line, *codes):
    if status_line is None or not any(f" {code} " in status_line + " " for code in codes):
        fail(f"{what}: expected {' or '.join(map(str, codes))}, got {status_line!r}")


# The flood holds more sockets than a shell's default soft limit allows.
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))

report_all("before the floods")

# 1. Oversized bodies and header.
expect_status("POST /1/check declaring 10 MiB", send_raw(
    "127.0.0.2",
    b"POST /1/check HTTP/1.1\r\nHost: a\r\nContent-Type: application/json\r\n"
    b"Content-Length: 10485760\r\n\r\n" + b"{" * 20480), 413)
expect_status("POST /1/check chunked beyond 16 KiB", send_raw(
    "127.0.0.2",
    b"POST /1/check HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n"
    + b"5000\r\n" + b"{" * 0x5000 + b"\r\n0\r\n\r\n"), 413)
expect_status("POST /1/repair declaring 1 MiB", send_raw(
    "127.0.0.2",
    b"POST /1/repair HTTP/1.1\r\nHost: a\r\nContent-Length: 1048576\r\n\r\n"), 413)
status = send_raw("127.0.0.2", b"GET /1/report/all HTTP/1.1\r\nHost: a\r\nX-Big: "
                  + b"a" * (128 * 1024) + b"\r\n\r\n")
if status is not None:
    expect_status("a 128 KiB header", status, 431)
measured["oversized"] = "413, 413, 413, " + ("431" if status else "closed")
report_all("after the oversized requests")

# 2. Beyond the per-peer cap, from one address.
flood_started = time.monotonic()
peer = [connect("127.0.0.3") for _ in range(MAX_PER_PEER + 16)]
closed = closed_by_agent(peer, 2.0)
if len(closed) != 16:
    fail(f"{MAX_PER_PEER + 16} connections from one address: the agent closed {len(closed)}, not 16")
held = [sock for sock in peer if sock not in closed]
for sock in closed:
    sock.close()
measured["per_peer"] = f"{len(held)} held, 16 closed"
report_all("with one address at its cap")

# 3. Beyond the total cap, from further addresses (64 each).
flood = []
want = OPEN_TO_ALL + 32 - 1 - len(held)  # the kept connection holds one slot
address = 4
while len(flood) < want:
    for _ in range(min(MAX_PER_PEER, want - len(flood))):
        flood.append(connect(f"127.0.0.{address}"))
    address += 1
closed = closed_by_agent(flood, 2.0)
held += [sock for sock in flood if sock not in closed]
for sock in closed:
    sock.close()
if len(held) != OPEN_TO_ALL - 1:
    fail(
        f"the agent holds {len(held)} flood connections, not its cap {MAX_CONNECTIONS} less "
        f"{RESERVED} reserved and the kept one"
    )
measured["total"] = f"{len(held)} held, {len(closed)} closed from {address - 4} addresses"
report_all("with every connection slot taken")
descriptors = len(os.listdir(f"/proc/{AGENT_PID}/fd"))
with open(f"/proc/{AGENT_PID}/limits") as limits:
    nofile = next(int(line.split()[3]) for line in limits if line.startswith("Max open files"))
if descriptors >= nofile - 256:
    fail(f"the agent holds {descriptors} descriptors at its connection cap, its limit is {nofile}")
measured["agent_descriptors_at_cap"] = f"{descriptors} of {nofile}"
late = connect("127.0.0.1")
if not closed_by_agent([late], 2.0):
    fail("a new connection beyond the total cap was not closed")
late.close()
report_all("after a connection beyond the cap")

# 4. Slow-loris: new connections (held ones closed for them) send a request header one
#    byte a second; at the same time a request body stalls and a keep-alive connection idles
#    after one request.
# Slots for them: 16 slow-loris connections, the stalled body and the idle keep-alive one.
for sock in held[:18]:
    sock.close()
held = held[18:]
time.sleep(0.5)
# The stalled body in a thread: the kept connection must be used meanwhile (the agent closes a
# keep-alive connection that sends no new request within the header timeout).
stalled = {}
stalled_started = time.monotonic()
stalled_thread = threading.Thread(target=lambda: stalled.update(status=send_raw(
    "127.0.0.201", b"POST /1/check HTTP/1.1\r\nHost: a\r\nContent-Length: 100\r\n\r\n{\"a\"",
    wait=HEADER_TIMEOUT + 5), took=time.monotonic() - stalled_started))
stalled_thread.start()
# A keep-alive connection that made one request and then sends nothing: closed by the agent too.
idler = connect("127.0.0.202")
idler.send(b"GET /healthz HTTP/1.1\r\nHost: a\r\n\r\n")
idle_since = time.monotonic()
loris_started = time.monotonic()
loris = [connect("127.0.0.200") for _ in range(16)]
for sock in loris:
    sock.send(b"GET /1/report/all HTTP/1.1\r\nHost: a\r\n")
loris_closed = set()
while time.monotonic() - loris_started < HEADER_TIMEOUT + 5 and len(loris_closed) < len(loris):
    for sock in loris:
        if sock in loris_closed:
            continue
        try:
            sock.send(b"X")
        except (BrokenPipeError, ConnectionResetError):
            loris_closed.add(sock)
    loris_closed |= closed_by_agent([s for s in loris if s not in loris_closed], 1.0)
    if time.monotonic() - loris_started < HEADER_TIMEOUT - 1 and loris_closed:
        fail(f"slow-loris connections closed after {time.monotonic() - loris_started:.1f} s, "
             f"before the header timeout {HEADER_TIMEOUT} s")
    report_all("during the slow-loris")
if len(loris_closed) != len(loris):
    fail(f"{len(loris) - len(loris_closed)} slow-loris connections still open after "
         f"{HEADER_TIMEOUT + 5} s (header timeout {HEADER_TIMEOUT} s)")
measured["slow_loris"] = f"16 closed after {time.monotonic() - loris_started:.1f} s"
for sock in loris:
    sock.close()
while stalled_thread.is_alive():
    stalled_thread.join(2.0)
    report_all("while a body stalls")
expect_status("a stalled body", stalled.get("status"), 408)
measured["stalled_body"] = f"408 after {stalled['took']:.1f} s"

# 5. The idle flood (connections that never sent a byte) ends by itself, at the header timeout
#    or the idle timeout; the kept connection is used every 2 s meanwhile.
open_idle = set(held)
while open_idle and time.monotonic() - flood_started < IDLE_TIMEOUT + 5:
    open_idle -= closed_by_agent(list(open_idle), 2.0)
    report_all("while the idle flood drains")
if open_idle:
    fail(f"{len(open_idle)} idle connections still open {IDLE_TIMEOUT + 5} s after the flood began")
measured["idle_drained"] = f"{len(held)} closed by the agent {time.monotonic() - flood_started:.1f} s after the flood began"
for sock in held:
    sock.close()
idler_closed = False
while not idler_closed and time.monotonic() - idle_since < IDLE_TIMEOUT + 5:
    idler_closed = bool(closed_by_agent([idler], 2.0))
    report_all("while a keep-alive connection idles")
if not idler_closed:
    fail(f"an idle keep-alive connection is still open after {IDLE_TIMEOUT + 5} s")
measured["idle_keep_alive"] = f"closed within {time.monotonic() - idle_since:.1f} s"
idler.close()
fresh = http.client.HTTPConnection("127.0.0.1", PORT, timeout=10)
fresh.request("GET", "/1/report/all")
if fresh.getresponse().status != 200:
    fail("a new connection after the flood is not answered")
measured["kept_connection_requests"] = keeper_requests
measured["seconds"] = round(time.monotonic() - STARTED, 1)
print(json.dumps(measured))
