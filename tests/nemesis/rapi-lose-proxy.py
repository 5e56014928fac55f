#!/usr/bin/env python3
"""A TCP proxy in front of a node's RAPI that loses answers on demand.

    rapi-lose-proxy.py LISTEN_PORT TARGET_PORT FLAG_FILE LOG_FILE

Listens on 127.0.0.1:LISTEN_PORT and forwards every connection to 127.0.0.1:TARGET_PORT, bytes
as they come (TLS passes through: the client still verifies Ganeti's own certificate). While
FLAG_FILE exists, the first bytes Ganeti sends back on a connection are dropped and both sides
closed: a request already sent is carried out (a job is created) and its answer is lost, the
fault a timeout or a broken connection gives a RAPI client. A connection opened meanwhile loses
its TLS handshake instead (the request never reaches Ganeti). Each loss is one line of LOG_FILE:
the time in milliseconds and the number of bytes dropped.
"""

import asyncio
import os
import sys
import time

CHUNK = 65536


def note(log, dropped):
    with open(log, "a") as f:
        f.write(f"{int(time.time() * 1000)} lost {dropped}\n")


async def pump(reader, writer, others, flag=None, log=None):
    try:
        while True:
            data = await reader.read(CHUNK)
            if not data:
                break
            if flag is not None and os.path.exists(flag):
                note(log, len(data))
                break
            writer.write(data)
            await writer.drain()
    except (ConnectionError, OSError):
        pass
    finally:
        for w in (writer, *others):
            w.close()


async def serve(target_port, flag, log, client_reader, client_writer):
    try:
        server_reader, server_writer = await asyncio.wait_for(
            asyncio.open_connection("127.0.0.1", target_port), 10)
    except (OSError, asyncio.TimeoutError):
        client_writer.close()
        return
    await asyncio.gather(
        pump(client_reader, server_writer, [client_writer]),
        pump(server_reader, client_writer, [server_writer], flag, log),
    )


async def main():
    if len(sys.argv) != 5:
        print(__doc__.strip().splitlines()[2].strip(), file=sys.stderr)
        sys.exit(2)
    listen_port, target_port = int(sys.argv[1]), int(sys.argv[2])
    flag, log = sys.argv[3], sys.argv[4]
    server = await asyncio.start_server(
        lambda r, w: serve(target_port, flag, log, r, w), "127.0.0.1", listen_port)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    asyncio.run(main())
