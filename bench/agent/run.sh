#!/usr/bin/env bash
# Throughput, latency and memory of nodecare-agent's cached endpoints, side by side with a bare
# hyper server answering the same bytes (the upper bound), using wrk (Debian package `wrk`).
#
#   bench/agent/run.sh [DURATION_SECONDS] [CONNECTIONS]
#
# Needs root (the diagnose whitelist must be root:root). Prints one line per target and the
# agent's RSS; see docs/PERFORMANCE.md for the goals.
set -euo pipefail
cd "$(dirname "$0")/../.."
. bench/lib.sh
DURATION=${1:-$(bench_size 1 10)}
CONNECTIONS=${2:-$(bench_size 4 16)}
AGENT_PORT=${AGENT_PORT:-18151}
BARE_PORT=${BARE_PORT:-18152}
command -v wrk >/dev/null || { echo "wrk not found: apt-get install wrk" >&2; exit 2; }
# PIN=1 puts the servers on core 0 and wrk on core 1 (two or more cores). Off by default: on two
# cores the servers' runtime threads then share one core, which lengthens the tail (PERFORMANCE.md).
PIN_SERVER=() PIN_CLIENT=()
if [[ ${PIN:-0} == 1 && $(nproc) -ge 2 ]] && command -v taskset >/dev/null; then
  PIN_SERVER=(taskset -c 0) PIN_CLIENT=(taskset -c 1)
fi

bench_build -p nodecare-agent --bin nodecare-agent --example bare_hyper
BIN=$BENCH_TARGET

WORK=$(mktemp -d)
AGENT_PID="" BARE_PID=""
cleanup() {
  # The servers die of the SIGTERM sent here; that is not the benchmark's exit status.
  if [[ -n $AGENT_PID ]]; then kill "$AGENT_PID" 2>/dev/null; wait "$AGENT_PID" 2>/dev/null || true; fi
  if [[ -n $BARE_PID ]]; then kill "$BARE_PID" 2>/dev/null; wait "$BARE_PID" 2>/dev/null || true; fi
  rm -rf "$WORK"
}
trap cleanup EXIT

install -d -o root -g root -m 0755 "$WORK/diagnose"
for script in always-ok ecc-memory; do
  install -o root -g root -m 0755 "whitelist-examples/diagnose/$script" "$WORK/diagnose/$script"
done
head -c 20 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$WORK/hmac.key"; echo >>"$WORK/hmac.key"
chmod 600 "$WORK/hmac.key"  # the agent refuses a key others can read

"${PIN_SERVER[@]}" "$BIN/nodecare-agent" --listen "127.0.0.1:$AGENT_PORT" --diagnose-dir "$WORK/diagnose" \
  --hmac-key "$WORK/hmac.key" --state-dir "$WORK/state" --node-name bench --log warn &
AGENT_PID=$!
AGENT="http://127.0.0.1:$AGENT_PORT"
for _ in $(seq 50); do
  curl -fs "$AGENT/1/report/node/diagnose/signed" >/dev/null 2>&1 && break
  sleep 0.1
done
curl -fs "$AGENT/1/report/node/diagnose/signed" >/dev/null 2>&1 || { echo "the agent did not answer within 5 s" >&2; exit 1; }
curl -fs "$AGENT/1/report/node/diagnose" >"$WORK/diagnose.json"
curl -fs "$AGENT/1/report/all" >"$WORK/all.json"

"${PIN_SERVER[@]}" "$BIN/examples/bare_hyper" "127.0.0.1:$BARE_PORT" \
  "/1/report/node/diagnose=$WORK/diagnose.json" "/1/report/all=$WORK/all.json" &
BARE_PID=$!
BARE="http://127.0.0.1:$BARE_PORT"
sleep 0.3

run() { # label url
  local out rps p99
  out=$("${PIN_CLIENT[@]}" wrk -t1 -c"$CONNECTIONS" -d"${DURATION}s" --latency "$2")
  rps=$(awk '/^Requests\/sec:/ {print $2}' <<<"$out")
  p50=$(awk '$1=="50%" {print $2}' <<<"$out")
  p99=$(awk '$1=="99%" {print $2}' <<<"$out")
  errors=$(grep -E 'Non-2xx|Socket errors' <<<"$out" | tr '\n' ' ' || true)
  printf '%-34s %10s req/s  p50 %8s  p99 %8s  %s\n' "$1" "$rps" "$p50" "$p99" "$errors"
  echo "$rps" >"$WORK/rps-$(tr ' /' '__' <<<"$1")"
}

echo "wrk -t1 -c$CONNECTIONS -d${DURATION}s --latency; $(nproc) cores; pinning: ${PIN_SERVER[*]:-none} / ${PIN_CLIENT[*]:-none}; body sizes:" \
  "diagnose $(wc -c <"$WORK/diagnose.json") B, all $(wc -c <"$WORK/all.json") B"
run "agent /1/report/node/diagnose" "$AGENT/1/report/node/diagnose"
run "bare  /1/report/node/diagnose" "$BARE/1/report/node/diagnose"
run "agent /1/report/all" "$AGENT/1/report/all"
run "bare  /1/report/all" "$BARE/1/report/all"
run "agent /1/report/node/diagnose/signed" "$AGENT/1/report/node/diagnose/signed"

ratio() { awk -v a="$(cat "$WORK/rps-$1")" -v b="$(cat "$WORK/rps-$2")" 'BEGIN {printf "%.0f%%", 100*a/b}'; }
echo "agent/bare throughput: diagnose $(ratio agent__1_report_node_diagnose bare___1_report_node_diagnose)," \
  "all $(ratio agent__1_report_all bare___1_report_all)"
grep -E '^(VmRSS|VmHWM)' "/proc/$AGENT_PID/status" | sed 's/^/agent /'
