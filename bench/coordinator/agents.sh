# Shared by the coordinator's benchmarks (sourced): descriptors and the fake agents.
# Fake agents run in processes of AGENTS_PER_PROCESS (default 4000) agents each, since every
# process has its own descriptor limit: an agent holds its listener, the coordinator's watch and
# a kept connection.

# raise_nofile COUNT: the soft descriptor limit up to the hard one; fails clearly when the
# coordinator's share (a watch and a connection per agent, and a reserve) cannot fit.
raise_nofile() {
    hard=$(ulimit -Hn)
    if [ "$hard" = unlimited ]; then ulimit -n 1048576 2>/dev/null || true; else ulimit -n "$hard"; fi
    soft=$(ulimit -n)
    need=$(( $1 + 1100 ))
    if [ "$soft" != unlimited ] && [ "$soft" -lt "$need" ]; then
        echo "$1 agents need ulimit -n >= $need (watches and requests); the hard limit is $hard" >&2
        exit 1
    fi
}

# dead PID: whether the process has exited (a zombie not yet waited for counts as exited).
dead() {
    [ -r "/proc/$1/stat" ] || return 0
    read -r _ _ state _ <"/proc/$1/stat" || return 0
    [ "$state" = Z ]
}

agents_pids=
stop_agents() {
    for pid in $agents_pids; do kill "$pid" 2>/dev/null || true; done
    for pid in $agents_pids; do wait "$pid" 2>/dev/null || true; done
    agents_pids=
}

# start_agents BIN COUNT FILE: starts COUNT fake agents (nodes 1..COUNT), waits until every
# process listens (bounded by AGENTS_START_TIMEOUT, default 300 s) and writes all their
# `node url` lines to FILE. Exits with the reason as soon as one process fails.
start_agents() {
    per=${AGENTS_PER_PROCESS:-4000}
    first=1
    shards=
    while [ "$first" -le "$2" ]; do
        n=$(( $2 - first + 1 )); [ "$n" -le "$per" ] || n=$per
        "$1" serve-agents "$n" "$3.$first" "$first" "$3" &
        agents_pids="$agents_pids $!"
        shards="$shards $3.$first"
        first=$(( first + n ))
    done
    waited=0
    for shard in $shards; do
        while [ ! -f "$shard" ]; do
            for pid in $agents_pids; do
                if dead "$pid"; then
                    status=0; wait "$pid" || status=$?
                    echo "the fake agents (process $pid) exited with status $status before listening: see the error above" >&2
                    exit 1
                fi
            done
            timeout=${AGENTS_START_TIMEOUT:-300}
            [ "$waited" -lt $(( timeout * 10 )) ] || { echo "timed out after $timeout s waiting for $2 fake agents to listen" >&2; exit 1; }
            sleep 0.1; waited=$((waited + 1))
        done
    done
    # shellcheck disable=SC2086
    cat $shards >"$3"
}

# each_agent_count MODE "COUNTS" [ARG...]: for each count of COUNTS, that many fake agents
# started, `$BENCH_BIN MODE FILE ARG...` run over them (FILE: their `node url` lines), the agents
# stopped; the work files are removed when the script exits.
each_agent_count() {
    mode=$1; counts=$2; shift 2
    work=$(mktemp -d)
    trap 'stop_agents; rm -rf "$work"' EXIT
    trap 'exit 130' INT TERM
    for count in $counts; do
        raise_nofile "$count"
        file="$work/agents-$count"
        start_agents "$BENCH_BIN" "$count" "$file"
        "$BENCH_BIN" "$mode" "$file" "$@"
        stop_agents
    done
}
