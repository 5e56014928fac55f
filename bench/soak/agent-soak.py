#!/usr/bin/env python3
"""Soak load for nodecare-agent on loopback: normal requests mixed with slowloris connections,
oversize headers, oversize bodies and garbage, for a bounded time.

    agent-soak.py HOST PORT AGENT_PID SECONDS

Normal clients (keep-alive) GET /1/report/node/diagnose and /1/report/node/diagnose/signed and
time each answer; every one must be 200. Abusive clients run beside them all the time. Every 10 s
the agent's VmRSS is sampled from /proc. At the end one JSON line per minute (normal requests,
p50/p99, refusals, RSS) and a verdict: memory flat (last minute's mean RSS within 10 % + 1 MiB
of the first's), p99 kept (last minute's p99 at most twice the first's + 2 ms), nothing valid
refused. Exit 1 if any of the three fails.

Only the given loopback address is contacted; every loop stops at the deadline.
"""

import asyncio
import json
import os
import random
import sys
import time

HOST, PORT, PID, SECONDS = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
if not (HOST.startswith("127.") or HOST in ("::1", "localhost")):
    sys.exit("loopback only")
START = time.monotonic()
DEADLINE = START + SECONDS
NORMAL_CLIENTS = 4
SLOWLORIS = 100
PATHS = ["/1/report/node/diagnose", "/1/report/node/diagnose/signed"]

latencies = {}  # minute -> [seconds]
refused = {}  # minute -> count of valid requests not answered 200
rss = {}  # minute -> [kB]
abuse = {"slowloris_opened": 0, "slowloris_closed_by_agent": 0, "oversize_headers": 0,
         "oversize_bodies": 0, "garbage": 0, "abuse_answers": {}}


def minute():
    return int((time.monotonic() - START) // 60)


async def read_response(reader):
    """One HTTP/1.1 response (status, body) with Content-Length."""
    line = await reader.readline()
    if not line:
        raise ConnectionError("closed")
    status = int(line.split()[1])
    length = 0
    while True:
        header = await reader.readline()
        if header in (b"\r\n", b"\n", b""):
            break
        name, _, value = header.decode("latin-1").partition(":")
        if name.strip().lower() == "content-length":
            length = int(value.strip())
    body = await reader.readexactly(length) if length else b""
    return status, body


async def normal_client():
    reader = writer = None
    while time.monotonic() < DEADLINE:
        try:
            if writer is None:
                reader, writer = await asyncio.open_connection(HOST, PORT)
            path = random.choice(PATHS)
            t0 = time.monotonic()
            writer.write(f"GET {path} HTTP/1.1\r\nHost: agent\r\n\r\n".encode())
            await writer.drain()
            status, _ = await asyncio.wait_for(read_response(reader), 5)
            elapsed = time.monotonic() - t0
            latencies.setdefault(minute(), []).append(elapsed)
            if status != 200:
                refused[minute()] = refused.get(minute(), 0) + 1
        except (OSError, ConnectionError, asyncio.TimeoutError, asyncio.IncompleteReadError,
                ValueError, IndexError):
            refused[minute()] = refused.get(minute(), 0) + 1
            if writer is not None:
                writer.close()
            writer = None
        await asyncio.sleep(0.005)
    if writer is not None:
        writer.close()


# The abuse comes from another loopback address than the normal clients, as it would from
# another host than the coordinator: the agent caps connections per peer address (64).
ABUSE_ADDRESS = ("127.0.0.2", 0) if HOST.startswith("127.") else None


async def slowloris():
    while time.monotonic() < DEADLINE:
        try:
            reader, writer = await asyncio.open_connection(HOST, PORT, local_addr=ABUSE_ADDRESS)
        except OSError:
            await asyncio.sleep(0.5)
            continue
        abuse["slowloris_opened"] += 1
        try:
            writer.write(b"GET /1/report/all HTTP/1.1\r\nHost: agent\r\n")
            await writer.drain()
            while time.monotonic() < DEADLINE:
                await asyncio.sleep(2)
                writer.write(b"X-Slow: %d\r\n" % random.randrange(10**6))
                await writer.drain()
                if reader.at_eof():
                    break
        except (OSError, ConnectionError):
            pass
        if time.monotonic() < DEADLINE:
            abuse["slowloris_closed_by_agent"] += 1
        writer.close()


def note_answer(kind, data):
    key = f"{kind}:{data.split(b' ')[1].decode(errors='replace') if data.startswith(b'HTTP/') else 'closed'}"
    abuse["abuse_answers"][key] = abuse["abuse_answers"].get(key, 0) + 1


async def one_shot(kind, payload, stream=None):
    try:
        reader, writer = await asyncio.open_connection(HOST, PORT, local_addr=ABUSE_ADDRESS)
    except OSError:
        return
    try:
        writer.write(payload)
        await writer.drain()
        if stream:
            for _ in range(stream[0]):
                writer.write(stream[1])
                await writer.drain()
        data = await asyncio.wait_for(reader.read(64), 15)
        note_answer(kind, data)
    except (OSError, ConnectionError, asyncio.TimeoutError):
        note_answer(kind, b"")
    finally:
        writer.close()


async def abuser():
    while time.monotonic() < DEADLINE:
        choice = random.randrange(3)
        if choice == 0:
            abuse["oversize_headers"] += 1
            big = b"X-Big: " + b"a" * random.choice([70_000, 200_000, 1_000_000]) + b"\r\n"
            await one_shot("oversize_headers",
                           b"GET /1/report/all HTTP/1.1\r\nHost: agent\r\n" + big + b"\r\n")
        elif choice == 1:
            abuse["oversize_bodies"] += 1
            await one_shot("oversize_bodies",
                           b"POST /1/repair HTTP/1.1\r\nHost: agent\r\nContent-Type: application/json\r\n"
                           b"Content-Length: 100000000\r\n\r\n", stream=(16, b"{" * 65536))
        else:
            abuse["garbage"] += 1
            await one_shot("garbage", os.urandom(random.randrange(1, 4096)))
        await asyncio.sleep(0.02)


async def sampler():
    while time.monotonic() < DEADLINE:
        with open(f"/proc/{PID}/status") as status:
            for line in status:
                if line.startswith("VmRSS:"):
                    rss.setdefault(minute(), []).append(int(line.split()[1]))
        await asyncio.sleep(10)


def pct(values, p):
    values = sorted(values)
    return values[min(len(values) - 1, int(len(values) * p))] if values else 0.0


async def main():
    tasks = [normal_client() for _ in range(NORMAL_CLIENTS)]
    tasks += [slowloris() for _ in range(SLOWLORIS)]
    tasks += [abuser() for _ in range(4)]
    tasks.append(sampler())
    await asyncio.gather(*tasks)
    minutes = sorted(latencies)
    rows = []
    for m in minutes:
        row = {"minute": m, "normal": len(latencies[m]),
               "p50_ms": round(pct(latencies[m], 0.50) * 1000, 2),
               "p99_ms": round(pct(latencies[m], 0.99) * 1000, 2),
               "refused": refused.get(m, 0),
               "rss_kib": round(sum(rss.get(m, [0])) / max(1, len(rss.get(m, [0]))))}
        rows.append(row)
        print(json.dumps(row))
    print(json.dumps(abuse))
    first, last = rows[0], rows[-1]
    flat = last["rss_kib"] <= first["rss_kib"] * 1.10 + 1024
    p99_kept = last["p99_ms"] <= first["p99_ms"] * 2 + 2
    none_refused = sum(refused.values()) == 0
    print(json.dumps({"rss_first_kib": first["rss_kib"], "rss_last_kib": last["rss_kib"],
                      "p99_first_ms": first["p99_ms"], "p99_last_ms": last["p99_ms"],
                      "normal_requests": sum(len(v) for v in latencies.values()),
                      "valid_refused": sum(refused.values()),
                      "memory_flat": flat, "p99_kept": p99_kept}))
    sys.exit(0 if flat and p99_kept and none_refused else 1)


asyncio.run(main())
