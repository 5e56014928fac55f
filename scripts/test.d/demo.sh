#!/usr/bin/env bash
# The README's main command, exactly as a new user runs it: `./scripts/demo` must pass (it checks
# every step it prints and exits non-zero with what it expected and what it found), and
# `./scripts/demo --keep-running` must serve the web page and /1/status until it is stopped.
# Needs root (the agents' whitelists must be root-owned), like the demo itself.
set -euo pipefail
cd "$(dirname "$0")/../.."
if [ "$(id -u)" -ne 0 ]; then
  if [ "${CI:-}" = true ]; then echo "demo: must run as root" >&2; exit 1; fi
  echo "demo: skipped (not root)"; exit 0
fi

log=$(mktemp -d)
trap 'kill "${pid:-}" 2>/dev/null || true; rm -rf "$log"' EXIT

echo "demo: ./scripts/demo"
if ! ./scripts/demo >"$log/run.txt" 2>&1; then
  cat "$log/run.txt" >&2; echo "demo: FAILED" >&2; exit 1
fi
grep -q "demo finished: every step as expected" "$log/run.txt" \
  || { cat "$log/run.txt" >&2; echo "demo: no closing line" >&2; exit 1; }
tail -n 4 "$log/run.txt"

# --keep-running on a free loopback port: the page and the API answer while it runs, and
# SIGINT (Ctrl-C) stops it cleanly.
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
echo "demo: ./scripts/demo --keep-running --listen 127.0.0.1:$port"
./scripts/demo --keep-running --listen "127.0.0.1:$port" >"$log/keep.txt" 2>&1 &
pid=$!
for _ in $(seq 1 600); do
  grep -q "still running" "$log/keep.txt" && break
  kill -0 "$pid" 2>/dev/null || { cat "$log/keep.txt" >&2; echo "demo: --keep-running exited early" >&2; exit 1; }
  sleep 0.5
done
grep -q "still running" "$log/keep.txt" || { cat "$log/keep.txt" >&2; echo "demo: --keep-running never got ready" >&2; exit 1; }
sleep 3   # a few of its one-second rounds
page=$(curl -fsS "http://127.0.0.1:$port/ui/")
grep -q "node3.demo.test" <<<"$page" || { echo "demo: the web page does not show node3" >&2; exit 1; }
status=$(curl -fsS "http://127.0.0.1:$port/1/status")
jq -e 'length == 1 and .[0].node == "node3.demo.test" and .[0]["repair-status"] == "completed"' \
  <<<"$status" >/dev/null || { echo "demo: unexpected /1/status: $status" >&2; exit 1; }
echo "demo: /ui/ and /1/status answer while it keeps running"
kill -INT "$pid"
for _ in $(seq 1 60); do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
if kill -0 "$pid" 2>/dev/null; then echo "demo: did not stop on SIGINT" >&2; exit 1; fi
wait "$pid" || { cat "$log/keep.txt" >&2; echo "demo: --keep-running failed" >&2; exit 1; }
pid=
grep -q "demo finished: every step as expected" "$log/keep.txt" \
  || { cat "$log/keep.txt" >&2; echo "demo: --keep-running did not finish cleanly" >&2; exit 1; }
if grep -q "round failed" "$log/keep.txt"; then
  grep "round failed" "$log/keep.txt" >&2; echo "demo: a round failed while it kept running" >&2; exit 1
fi
echo "demo: passed"
