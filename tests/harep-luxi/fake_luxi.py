#!/usr/bin/env python3
"""A LUXI server replaying a recorded harep run, so that the real `harep --dry-run` can be run
without a cluster. It answers every request with the recorded answer to the same method and
query kind (spec/ganeti-samples/luxi/luxi-harep-dryrun-trace.json: three nodes, node3 offline;
inst7, plain on node3, needs a reinstall), with one instance's tags replaced.

    fake_luxi.py TRACE SOCKET INSTANCE TAGS-JSON

Serves until killed. Messages are JSON terminated by ETX (0x03), as Ganeti's LUXI.
"""
import json
import os
import socket
import sys

trace_path, sock_path, instance, tags_json = sys.argv[1:5]
tags = json.loads(tags_json)
trace = json.load(open(trace_path))
answers = {}
for req, resp in zip(trace[0::2], trace[1::2]):
    m = req["msg"]
    key = (m["method"], m["args"][0] if m["method"] == "Query" else None)
    answers[key] = resp["msg"]
inst = answers[("Query", "instance")]["result"]
names = [f["name"] for f in inst["fields"]]
for row in inst["data"]:
    if row[names.index("name")][1] == instance:
        row[names.index("tags")] = [0, tags]

if os.path.exists(sock_path):
    os.unlink(sock_path)
srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
srv.bind(sock_path)
srv.listen(4)
while True:
    conn, _ = srv.accept()
    buf = b""
    with conn:
        while True:
            data = conn.recv(65536)
            if not data:
                break
            buf += data
            while b"\x03" in buf:
                raw, buf = buf.split(b"\x03", 1)
                m = json.loads(raw)
                key = (m["method"], m["args"][0] if m["method"] == "Query" else None)
                answer = answers.get(key, {"success": False, "result": ["OpPrereqError", ["not recorded", "wrong_input"]]})
                conn.sendall(json.dumps(answer).encode() + b"\x03")
