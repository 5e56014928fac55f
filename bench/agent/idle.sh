#!/usr/bin/env bash
# What nodecare-agent costs at rest, side by side with Debian's real ganeti-mond 3.0.2 in the same
# window: PAIRS agents and PAIRS monds run at once for DURATION seconds, nobody reading them, and
# each pair's CPU and wakeups are compared. On a shared, loaded machine only the ratios within
# one window mean something.
#
#   bench/agent/idle.sh [DURATION_SECONDS] [PAIRS]      # defaults: 300 3
#
# Agents: the packaged configuration (packaging/config/agent.toml, every default) with three
# diagnose scripts (SCRIPTS, default: the shell examples always-ok, ecc-memory, smart-disks; a
# Python example costs ~25 ms of interpreter start per run) and every built-in collector; monds
# through tests/ganeti/mond-loopback.sh with a signed confd stub (its default collector set).
# CPU: utime+stime+cutime+cstime from /proc/<pid>/stat (children included: the scripts the agent
# runs, the tools either daemon forks). Wakeups: voluntary+nonvoluntary context switches of every
# thread (/proc/<pid>/task/*/status, sampled every second so threads that end are counted).
# AGENT_BIN=path uses that binary instead of building one. Needs root.
set -euo pipefail
cd "$(dirname "$0")/../.."
. bench/lib.sh
DURATION=${1:-$(bench_size 3 300)}
PAIRS=${2:-$(bench_size 1 3)}
# Start-up (the first runs, mond's first confd answers) is not rest: seconds left out.
SETTLE=${SETTLE:-$(bench_size 2 15)}
BASE_PORT=${BASE_PORT:-18171}
[[ -x /usr/sbin/ganeti-mond ]] || { echo "ganeti-mond not found: apt-get install ganeti" >&2; exit 2; }
if [[ -z ${AGENT_BIN:-} ]]; then
  bench_build -p nodecare-agent --bin nodecare-agent
  AGENT_BIN=$BENCH_TARGET/nodecare-agent
fi

WORK=$(mktemp -d)
AGENT_PIDS=() MOND_PORTS=()
cleanup() {
  for pid in "${AGENT_PIDS[@]}"; do kill "$pid" 2>/dev/null; wait "$pid" 2>/dev/null || true; done
  for port in "${MOND_PORTS[@]}"; do tests/ganeti/mond-loopback.sh stop "$port" >/dev/null 2>&1 || true; done
  rm -rf "$WORK"
}
trap cleanup EXIT

# Waits up to $2 seconds for $1 (a command) to succeed; an error otherwise, never a hang.
wait_for() {
  local deadline=$((SECONDS + $2))
  until eval "$1" >/dev/null 2>&1; do
    ((SECONDS < deadline)) || { echo "timed out after $2 s waiting for: $1" >&2; return 1; }
    sleep 0.2
  done
}

install -d -o root -g root -m 0755 "$WORK/diagnose"
for script in ${SCRIPTS:-always-ok ecc-memory smart-disks}; do
  install -o root -g root -m 0755 "whitelist-examples/diagnose/$script" "$WORK/diagnose/$script"
done
head -c 20 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$WORK/hmac.key"; echo >>"$WORK/hmac.key"
chmod 600 "$WORK/hmac.key"  # the agent refuses a key others can read

pairs=""
for i in $(seq "$PAIRS"); do
  agent_port=$((BASE_PORT + 2 * i)) mond_port=$((BASE_PORT + 2 * i + 1))
  timeout 60 tests/ganeti/mond-loopback.sh start "$mond_port" --confd-stub >&2
  MOND_PORTS+=("$mond_port")
  mond_pid=$(<"${NODECARE_GNT_MOND_STATE:-/tmp/nodecare-ganeti-mond}/$mond_port/mond.pid")
  "$AGENT_BIN" --config packaging/config/agent.toml --listen "127.0.0.1:$agent_port" \
    --diagnose-dir "$WORK/diagnose" --hmac-key "$WORK/hmac.key" --state-dir "$WORK/state$i" \
    --node-name "idle$i" --log warn &
  agent_pid=$!
  AGENT_PIDS+=("$agent_pid")
  wait_for "curl -fs http://127.0.0.1:$agent_port/1/report/node/diagnose/signed" 30
  pairs+="$agent_pid $mond_pid "
done
sleep "$SETTLE"
python3 - "$DURATION" $pairs <<'PY'
import glob, sys, time
duration = int(sys.argv[1])
pids = [int(p) for p in sys.argv[2:]]
hz = 100
def cpu(pid, which=(11, 12, 13, 14)):
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return sum(int(fields[i]) for i in which) / hz
def switches(pid):
    counts = {}
    for status in glob.glob(f"/proc/{pid}/task/*/status"):
        try:
            text = open(status).read()
        except OSError:
            continue
        n = sum(int(l.split()[1]) for l in text.splitlines() if "ctxt_switches:" in l)
        counts[status.split("/")[4]] = n
    return counts
start_cpu = {p: cpu(p) for p in pids}
start_own = {p: cpu(p, (11, 12)) for p in pids}
first = {p: switches(p) for p in pids}
last = {p: dict(first[p]) for p in pids}
end = time.monotonic() + duration
while time.monotonic() < end:
    time.sleep(1)
    for p in pids:
        for tid, n in switches(p).items():
            last[p][tid] = n
cpu_used = {p: cpu(p) - start_cpu[p] for p in pids}
own = {p: cpu(p, (11, 12)) - start_own[p] for p in pids}
wakeups = {p: sum(n - first[p].get(tid, 0) for tid, n in last[p].items()) / duration for p in pids}
print(f"{duration} s at rest, CPU per {duration} s (children included), wakeups/s (all threads)")
for i in range(0, len(pids), 2):
    a, m = pids[i], pids[i + 1]
    print(f"pair {i // 2 + 1}: agent {cpu_used[a]:.2f} s (own {own[a]:.2f}) {wakeups[a]:.2f}/s | "
          f"mond {cpu_used[m]:.2f} s (own {own[m]:.2f}) "
          f"{wakeups[m]:.2f}/s | ratio CPU {cpu_used[a] / max(cpu_used[m], 0.01):.2f} "
          f"wakeups {wakeups[a] / max(wakeups[m], 0.01):.2f}")
PY
