#!/usr/bin/env bash
# nodecare-agent vs Ganeti's real ganeti-mond 3.0.2 on this machine, side by side in one run:
# GET /1/report/all with wrk (Debian packages `wrk`, `ganeti`), same duration and connections.
#
#   bench/agent/mond-compare.sh [DURATION_SECONDS] [CONNECTIONS]
#
# mond runs on loopback through tests/ganeti/mond-loopback.sh with a signed confd stub that
# enables cpu-avg-load and lv (without confd mond's /1/report/all is a 500). The agent serves
# all its built-in collectors plus diagnose (a superset of mond's report). Prints requests/s,
# p50/p99 latency for both, the ratio, and the agent's RSS. Needs root.
set -euo pipefail
cd "$(dirname "$0")/../.."
. bench/lib.sh
DURATION=${1:-$(bench_size 1 10)}
CONNECTIONS=${2:-$(bench_size 4 16)}
AGENT_PORT=${AGENT_PORT:-18161}
MOND_PORT=${MOND_PORT:-18162}
command -v wrk >/dev/null || { echo "wrk not found: apt-get install wrk" >&2; exit 2; }
# PIN=1 puts the agent on core 0 and wrk on core 1 (two or more cores); off by default, as in
# run.sh. mond keeps its own scheduling: pinning it to one core would only slow it further.
PIN_SERVER=() PIN_CLIENT=()
if [[ ${PIN:-0} == 1 && $(nproc) -ge 2 ]] && command -v taskset >/dev/null; then
  PIN_SERVER=(taskset -c 0) PIN_CLIENT=(taskset -c 1)
fi
[[ -x /usr/sbin/ganeti-mond ]] || { echo "ganeti-mond not found: apt-get install ganeti" >&2; exit 2; }

bench_build -p nodecare-agent --bin nodecare-agent
BIN=$BENCH_TARGET

WORK=$(mktemp -d)
AGENT_PID=""
cleanup() {
  [[ -n $AGENT_PID ]] && kill "$AGENT_PID" 2>/dev/null && wait "$AGENT_PID" 2>/dev/null
  tests/ganeti/mond-loopback.sh stop "$MOND_PORT" >/dev/null 2>&1 || true
  rm -rf "$WORK"
}
trap cleanup EXIT

tests/ganeti/mond-loopback.sh start "$MOND_PORT" --confd-stub=cpu-avg-load,lv --warm >&2
MOND="http://127.0.0.1:$MOND_PORT"

install -d -o root -g root -m 0755 "$WORK/diagnose"
install -o root -g root -m 0755 whitelist-examples/diagnose/always-ok "$WORK/diagnose/always-ok"
head -c 20 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$WORK/hmac.key"; echo >>"$WORK/hmac.key"
chmod 600 "$WORK/hmac.key"  # the agent refuses a key others can read
"${PIN_SERVER[@]}" "$BIN/nodecare-agent" --listen "127.0.0.1:$AGENT_PORT" --diagnose-dir "$WORK/diagnose" \
  --hmac-key "$WORK/hmac.key" --state-dir "$WORK/state" --node-name bench --log warn &
AGENT_PID=$!
AGENT="http://127.0.0.1:$AGENT_PORT"
for _ in $(seq 50); do curl -fs "$AGENT/1/report/all" >/dev/null 2>&1 && break; sleep 0.1; done
curl -fs "$AGENT/1/report/all" >/dev/null 2>&1 || { echo "the agent did not answer within 5 s" >&2; exit 1; }
sleep 1

for target in "mond $MOND" "agent $AGENT"; do
  set -- $target
  code=$(curl -s -o "$WORK/$1.json" -w '%{http_code}' "$2/1/report/all")
  names=$(python3 -c 'import json,sys; print(",".join(r["name"] for r in json.load(open(sys.argv[1]))))' "$WORK/$1.json" 2>/dev/null || echo "?")
  echo "$1: /1/report/all -> HTTP $code, $(wc -c <"$WORK/$1.json") bytes, collectors: $names"
done

bench() { "${PIN_CLIENT[@]}" wrk -t1 -c"$CONNECTIONS" -d"${DURATION}s" --latency "$1/1/report/all" >"$WORK/$2.wrk"; }
bench "$MOND" mond
bench "$AGENT" agent
rss_kib=$(awk '/^VmRSS/ {print $2}' "/proc/$AGENT_PID/status")
hwm_kib=$(awk '/^VmHWM/ {print $2}' "/proc/$AGENT_PID/status")

summary() {
  awk -v who="$1" '
    /Requests\/sec/ {rps=$2}
    /^ +50%/ {p50=$2}
    /^ +99%/ {p99=$2}
    /Non-2xx/ {errors=$NF}
    END {printf "%-6s %12s req/s   p50 %-9s p99 %-9s non-2xx %s\n", who, rps, p50, p99, (errors==""?0:errors)}' "$WORK/$1.wrk"
}
echo "wrk -t1 -c$CONNECTIONS -d${DURATION}s --latency <url>/1/report/all"
summary mond
summary agent
mond_rps=$(awk '/Requests\/sec/ {print $2}' "$WORK/mond.wrk")
agent_rps=$(awk '/Requests\/sec/ {print $2}' "$WORK/agent.wrk")
python3 -c "print(f'ratio agent/mond: {float($agent_rps)/float($mond_rps):.1f}x')"
echo "agent RSS ${rss_kib} KiB (peak ${hwm_kib} KiB)"
