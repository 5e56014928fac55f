#!/usr/bin/env bash
# Demo: nodecare-agent serving the example diagnose scripts on localhost.
#
#   sudo agent/demo.sh [PORT]     (default 1815; Ctrl-C stops it and removes the temp files)
#
# The whitelist only runs root:root files with mode <= 0755, so the examples are copied into a
# temporary root-owned directory; a throwaway HMAC key is generated there too.
set -euo pipefail
cd "$(dirname "$0")/.."
PORT=${1:-1815}
[[ $(id -u) -eq 0 ]] || { echo "run as root (the whitelist requires root:root scripts)" >&2; exit 2; }
cargo build --quiet -p nodecare-agent --bin nodecare-agent
DEMO=$(mktemp -d /tmp/nodecare-demo.XXXXXX)
trap 'rm -rf "$DEMO"' EXIT
install -d -o root -g root -m 0755 "$DEMO/diagnose"
for script in whitelist-examples/diagnose/*; do
  install -o root -g root -m 0755 "$script" "$DEMO/diagnose/$(basename "$script")"
done
head -c 20 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$DEMO/hmac.key"; echo >>"$DEMO/hmac.key"
cat <<TEXT
nodecare-agent demo on http://127.0.0.1:$PORT  (Ctrl-C to stop)
  curl -s http://127.0.0.1:$PORT/1/list/collectors
  curl -s http://127.0.0.1:$PORT/1/report/node/diagnose
  curl -s http://127.0.0.1:$PORT/1/report/node/diagnose/signed | target/debug/nodecare-agent verify --hmac-key $DEMO/hmac.key
TEXT
target/debug/nodecare-agent --listen "127.0.0.1:$PORT" --diagnose-dir "$DEMO/diagnose" \
  --hmac-key "$DEMO/hmac.key" --state-dir "$DEMO/state" --node-name "$(hostname)" \
  --diagnose-interval-secs 10
