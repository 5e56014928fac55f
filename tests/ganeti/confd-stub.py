#!/usr/bin/env python3
"""A minimal signed confd responder, so a cluster-less ganeti-mond gets a
data-collector configuration instead of failing open.

Written from the protocol description: UDP datagrams "plj0" + JSON
{"hmac","msg","salt"}, HMAC-SHA1(key, salt + msg); replies are signed with the
request's rsalt as salt. Answers:
  type 0  (ping)            -> null
  type 8  (node-instances)  -> [[], []]   (no primary, no secondary instances)
  type 11 (data-collectors) -> {name: {"active": bool, "interval": us}}
  anything else             -> status 2 (not implemented)
Usage: confd-stub.py --key HMAC_KEY_FILE --bind ADDR [--port 1814]
                     --active NAME[,NAME...] [--interval-us 5000000]
"""
import argparse
import hashlib
import hmac
import json
import socket
import sys
import time

MAGIC = b"plj0"
MAX_SKEW = 300
COLLECTORS = ["cpu-avg-load", "xen-cpu-avg-load", "diskstats", "drbd", "inst-status-xen", "lv"]


def sign(key, salt, msg):
    return hmac.new(key, (salt + msg).encode(), hashlib.sha1).hexdigest()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--key", required=True)
    ap.add_argument("--bind", required=True)
    ap.add_argument("--port", type=int, default=1814)
    ap.add_argument("--active", default="cpu-avg-load,xen-cpu-avg-load")
    ap.add_argument("--interval-us", type=int, default=5000000)
    a = ap.parse_args()
    with open(a.key, "rb") as f:
        key = f.read()
    active = {n for n in a.active.split(",") if n}
    unknown = active - set(COLLECTORS)
    if unknown:
        print(f"unknown collector(s): {', '.join(sorted(unknown))}", file=sys.stderr)
        return 2
    collectors = {n: {"active": n in active, "interval": a.interval_us} for n in COLLECTORS}
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind((a.bind, a.port))
    print(f"confd stub on {a.bind}:{a.port}, active: {sorted(active)}", flush=True)
    while True:
        data, peer = sock.recvfrom(4096)
        try:
            if not data.startswith(MAGIC):
                raise ValueError("no magic")
            env = json.loads(data[len(MAGIC):])
            salt, msg = env["salt"], env["msg"]
            if not hmac.compare_digest(sign(key, salt, msg), str(env["hmac"]).lower()):
                raise ValueError("bad hmac")
            if abs(int(salt) - time.time()) > MAX_SKEW:
                raise ValueError("clock skew")
            req = json.loads(msg)
        except (ValueError, KeyError, TypeError) as e:
            print(f"{peer}: dropped request: {e}", flush=True)
            continue
        rtype = req.get("type")
        status, answer = 0, None
        if rtype == 0:
            answer = None
        elif rtype == 8:
            answer = [[], []]
        elif rtype == 11:
            answer = collectors
        else:
            status = 2
        print(f"{peer}: type {rtype} -> status {status}", flush=True)
        rmsg = json.dumps({"protocol": 1, "status": status, "answer": answer, "serial": 1})
        rsalt = str(req.get("rsalt", ""))
        reply = json.dumps({"hmac": sign(key, rsalt, rmsg), "msg": rmsg, "salt": rsalt})
        sock.sendto(MAGIC + reply.encode(), peer)


if __name__ == "__main__":
    sys.exit(main())
