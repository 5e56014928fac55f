#!/usr/bin/env python3
"""Holds slow connections against a coordinator on loopback, for measurements only.

Usage: slow-clients.py PORT COUNT SECONDS [one|many]

Opens COUNT connections to 127.0.0.1:PORT (never another host) from 127.0.0.2 (`one`, the
default) or each from its own loopback address 127.1.x.y (`many`), sends each an
unfinished request head, and reopens a connection 5 s after the coordinator closes it, until
SECONDS have passed. COUNT is at most 10 000 and SECONDS at most 120. Prints how many
connections were opened and how many were held at the end.
"""
import asyncio
import resource
import sys
import time

TARGET = "127.0.0.1"
SOURCE = "127.0.0.2"


async def client(port, until, counts, source):
    while time.monotonic() < until:
        try:
            reader, writer = await asyncio.open_connection(TARGET, port, local_addr=(source, 0))
        except OSError:
            await asyncio.sleep(1)
            continue
        counts["opened"] += 1
        counts["held"] += 1
        try:
            writer.write(b"GET /1/status HTTP/1.1\r\nHost: x\r\n")
            await writer.drain()
            await asyncio.wait_for(reader.read(512), max(0.1, until - time.monotonic()))
        except (OSError, asyncio.TimeoutError):
            pass
        counts["held"] -= 1
        writer.close()
        await asyncio.sleep(5)


async def main():
    port, count, seconds = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
    if not (0 < count <= 10_000 and 0 < seconds <= 120):
        sys.exit("COUNT must be 1..10000 and SECONDS 1..120")
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    until = time.monotonic() + seconds
    counts = {"opened": 0, "held": 0}
    many = len(sys.argv) > 4 and sys.argv[4] == "many"
    sources = [f"127.1.{i // 250}.{i % 250 + 1}" if many else SOURCE for i in range(count)]
    tasks = [asyncio.create_task(client(port, until, counts, source)) for source in sources]
    await asyncio.sleep(seconds - 1)
    print(f"opened {counts['opened']} held {counts['held']}", flush=True)
    await asyncio.gather(*tasks)


asyncio.run(main())
