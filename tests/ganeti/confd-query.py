#!/usr/bin/env python3
"""Send one signed confd request over UDP and print the verified replies.

Written from the protocol description (magic "plj0", JSON envelope
{"hmac","msg","salt"}, HMAC-SHA1 over salt+msg with the cluster key).
Usage: confd-query.py --key HMAC_KEY_FILE [--type N] [--query JSON]
                      [--port 1814] [--timeout S] HOST [HOST...]
Exit status 0 when every host answered with a valid signature and status 0.
"""
import argparse
import hashlib
import hmac
import json
import socket
import sys
import time
import uuid

MAGIC = b"plj0"


def sign(key, salt, msg):
    return hmac.new(key, (salt + msg).encode(), hashlib.sha1).hexdigest()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--key", required=True)
    ap.add_argument("--type", type=int, default=0, help="0 ping, 3 cluster-master, 11 data-collectors, ...")
    ap.add_argument("--query", default="null", help="JSON value of the query")
    ap.add_argument("--port", type=int, default=1814)
    ap.add_argument("--timeout", type=float, default=3.0)
    ap.add_argument("hosts", nargs="+")
    a = ap.parse_args()
    with open(a.key, "rb") as f:
        key = f.read()
    query = json.loads(a.query)
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    pending = {}
    for host in a.hosts:
        rsalt = str(uuid.uuid4())
        msg = json.dumps({"protocol": 1, "type": a.type, "query": query, "rsalt": rsalt})
        salt = str(int(time.time()))
        env = json.dumps({"hmac": sign(key, salt, msg), "msg": msg, "salt": salt})
        sock.sendto(MAGIC + env.encode(), (host, a.port))
        pending[rsalt] = host
    deadline = time.time() + a.timeout
    failures = 0
    while pending and time.time() < deadline:
        sock.settimeout(max(0.01, deadline - time.time()))
        try:
            data, peer = sock.recvfrom(65536)
        except socket.timeout:
            break
        if not data.startswith(MAGIC):
            print(f"{peer[0]}: reply without magic", file=sys.stderr)
            failures += 1
            continue
        env = json.loads(data[len(MAGIC):])
        if env.get("salt") not in pending:
            continue
        host = pending.pop(env["salt"])
        ok_sig = hmac.compare_digest(sign(key, env["salt"], env["msg"]), env.get("hmac", "").lower())
        reply = json.loads(env["msg"])
        ok = ok_sig and reply.get("status") == 0
        failures += 0 if ok else 1
        print(json.dumps({"host": host, "signature_ok": ok_sig, "reply": reply}))
    for host in pending.values():
        print(f"{host}: no reply within {a.timeout} s", file=sys.stderr)
        failures += 1
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
