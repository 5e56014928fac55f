#!/usr/bin/env python3
"""One call to a Ganeti daemon's Unix socket (LUXI of ganeti-luxid, or ganeti-wconfd's RPC).

    uds-call.py [--timeout SECONDS] SOCKET METHOD [JSON-ARGS]

Both daemons speak the same framing: a JSON object {"method": ..., "args": [...]} followed
by the byte 0x03; the answer is {"success": bool, "result": ...} followed by 0x03. Prints the
answer's "result" as JSON. Exit status: 0 success, 1 the daemon answered with an error, 2 usage,
3 no answer in time (connect or reply), 4 any other socket error.
"""
import argparse
import json
import socket
import sys
import time

EOM = b"\x03"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--timeout", type=float, default=5.0)
    ap.add_argument("socket")
    ap.add_argument("method")
    ap.add_argument("args", nargs="?", default="[]")
    opts = ap.parse_args()
    try:
        args = json.loads(opts.args)
    except ValueError as err:
        print("bad JSON-ARGS: %s" % err, file=sys.stderr)
        return 2
    deadline = time.monotonic() + opts.timeout
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        # A full listen backlog makes connect() block: the timeout covers it.
        sock.settimeout(opts.timeout)
        sock.connect(opts.socket)
        sock.sendall(json.dumps({"method": opts.method, "args": args}).encode() + EOM)
        buf = b""
        while not buf.endswith(EOM):
            left = deadline - time.monotonic()
            if left <= 0:
                raise socket.timeout()
            sock.settimeout(left)
            chunk = sock.recv(65536)
            if not chunk:
                print("%s: connection closed before the answer" % opts.socket, file=sys.stderr)
                return 4
            buf += chunk
    except socket.timeout:
        print("%s: no answer to %s within %.1f s" % (opts.socket, opts.method, opts.timeout),
              file=sys.stderr)
        return 3
    except OSError as err:
        print("%s: %s" % (opts.socket, err), file=sys.stderr)
        return 4
    finally:
        sock.close()
    try:
        answer = json.loads(buf[:-1].decode())
    except ValueError as err:
        print("%s: unparsable answer: %s" % (opts.socket, err), file=sys.stderr)
        return 4
    print(json.dumps(answer.get("result")))
    return 0 if answer.get("success") else 1


if __name__ == "__main__":
    sys.exit(main())
