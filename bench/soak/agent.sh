#!/usr/bin/env bash
# Agent soak: 10 minutes (SOAK_SECONDS) of normal requests mixed with slowloris connections,
# oversize headers and bodies and garbage, on loopback, against a release nodecare-agent.
#
#   bench/soak/agent.sh            # as root (the diagnose whitelist must be root:root)
#
# Prints one line per minute (normal requests, p50/p99, refusals, RSS) and the verdict of
# agent-soak.py; exits 1 if memory grew, the p99 of normal requests degraded or a valid request
# was refused. BIN=target/debug uses a debug build instead of building the release one.
set -euo pipefail
cd "$(dirname "$0")/../.."
. bench/lib.sh
SECONDS_TOTAL=${SOAK_SECONDS:-$(bench_size 10 600)}
PORT=${SOAK_PORT:-18161}
if [[ -z ${BIN:-} ]]; then
  bench_build -p nodecare-agent --bin nodecare-agent
  BIN=$BENCH_TARGET
fi
WORK=$(mktemp -d)
AGENT_PID=""
cleanup() {
  if [[ -n $AGENT_PID ]]; then kill "$AGENT_PID" 2>/dev/null; wait "$AGENT_PID" 2>/dev/null || true; fi
  rm -rf "$WORK"
}
trap cleanup EXIT
install -d -o root -g root -m 0755 "$WORK/diagnose"
for script in always-ok ecc-memory; do
  install -o root -g root -m 0755 "whitelist-examples/diagnose/$script" "$WORK/diagnose/$script"
done
head -c 20 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$WORK/hmac.key"; echo >>"$WORK/hmac.key"
chmod 600 "$WORK/hmac.key"  # the agent refuses a key others can read
ulimit -n 4096
"$BIN/nodecare-agent" --listen "127.0.0.1:$PORT" --diagnose-dir "$WORK/diagnose" \
  --hmac-key "$WORK/hmac.key" --state-dir "$WORK/state" --node-name soak --log error &
AGENT_PID=$!
for _ in $(seq 100); do
  curl -fs "http://127.0.0.1:$PORT/1/report/node/diagnose/signed" >/dev/null 2>&1 && break
  sleep 0.1
done
curl -fs "http://127.0.0.1:$PORT/1/report/node/diagnose/signed" >/dev/null 2>&1 || { echo "the agent did not answer within 10 s" >&2; exit 1; }
python3 bench/soak/agent-soak.py 127.0.0.1 "$PORT" "$AGENT_PID" "$SECONDS_TOTAL"
