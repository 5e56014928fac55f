#!/usr/bin/env bash
# Boot test: the packages on a real systemd. Boots a Debian 12 root (debootstrap, cached; Debian 13
# with NODECARE_SYSTEMD_SUITE=trixie, scripts/test.d/systemd-boot-trixie.sh) with systemd as PID 1 in its own PID and mount namespaces (tests/systemd/boot-lib.sh), then does
# what an operator does on a node and checks what the units promise:
#
#  1. `apt install ./nodecare-agent_…deb ./nodecare-coordinator_…deb` (the README's
#     installation): the agent's unit is enabled and started by the package and reaches READY=1
#     (Type=notify: "active" only after READY=1); the coordinator's is enabled, not started;
#     `journalctl -u` has readable logs.
#  2. The agent under its unit: example diagnose scripts run and their verdict is signed; a
#     hanging script is killed with what it started; example repair commands and the
#     apt-upgrade-and-reboot campaign hook run with the unit's sandbox (every [Service]
#     setting of the installed unit, in a transient unit) and do their real work: the hook
#     upgrades a local test package (with a setuid file) from a file repository and schedules
#     the reboot with systemd-run; the daemon writes only where its unit allows. 2e: probes in a
#     transient unit with the agent's sandbox: what it forbids is refused, what repairs need works.
#  3. Watchdog: a stopped agent (SIGSTOP) is killed and restarted by systemd within
#     WatchdogSec + RestartSec, the journal says "watchdog timeout", the sequence number survives;
#     3b: the coordinator whose RAPI never answers (its rounds hang) likewise, its store kept.
#  4. Limits: the settings the units declare are in force (`systemctl show`, /proc/PID/limits).
#     4b: the agent under its unit survives connection floods (tests/systemd/agent-flood.py, run
#     with the root's python3: oversized bodies and headers, idle connections beyond the per-peer
#     and the total cap, slow-loris headers, a stalled body): a kept connection is answered
#     `/1/report/all` throughout, the agent stays active and is not restarted.
#  7. The coordinator on a master candidate stands by, takes over when ssconf names its node
#     (a simulated RAPI: nodecare-ganeti-sim). 7c: probes in a transient unit with the
#     coordinator's sandbox: it writes only its state directory; /etc, /usr, /root, devices,
#     /proc/sys, capabilities, namespaces, W+X memory are refused.
#  6. `apt remove` stops the units and keeps configuration and state; `apt purge` removes what
#     the packages created and leaves the Ganeti files and the operator's scripts.
#  5. Upgrade from the previous release: installs the packages kept in
#     packaging/fixtures/previous/ (an earlier commit's build, store schema 5; never rebuilt by
#     the test), changes both configuration files, and under that release makes real state on
#     a simulated cluster: an incident (the agent, as node2, asks for an evacuation; the
#     coordinator completes it), an instance repair in flight (node3 drained, inst3 tagged for
#     auto-repair; its jobs run an hour, so its record is in the old store's instance_repairs
#     table), the agent's sequence number. Then upgrades with `apt install -o
#     Dpkg::Options::=--force-confold ./…deb` (packaging/README.md, "Upgrading") and checks: the
#     changed files kept (the new ones as .dpkg-dist), each daemon restarted once
#     (InvocationID, "Started" lines, NRestarts 0), the store the same file migrated to this
#     release's schema (PRAGMA user_version) with no row or counter lost, the repair's record
#     now ledger entries carrying its jobs and no job submitted twice, the incident unchanged
#     (/1/status, `nodecare status`), the sequence numbers (the agent's, the coordinator's
#     record of them) not gone back.
#
# Needs root, debootstrap, unshare/nsenter (util-linux); skips otherwise. Reuses the packages
# of scripts/test.d/packaging.sh (<target-dir>/packages) when they are there; builds them
# otherwise. NODECARE_SYSTEMD_BREAK=<Setting=value> adds that setting to the agent's unit (a
# drop-in, right after the install) to show the test failing on a unit defect, e.g.
# ProtectSystem=yes (fails 2c) or LimitNOFILE=1024 (fails 4).
set -euo pipefail
cd "$(dirname "$0")/../.."
source tests/systemd/boot-lib.sh

say() { echo "systemd-boot: $*"; }
fail() {
    echo "systemd-boot: FAIL: $*" >&2
    if [ -n "$boot_pid" ]; then
        in_root journalctl --no-pager -n 60 -u nodecare-agent -u nodecare-coordinator >&2 2>/dev/null || true
    fi
    exit 1
}

if [ "$(id -u)" != 0 ]; then
    say "SKIP: needs root (boots systemd in namespaces)"
    exit 0
fi
missing=()
command -v debootstrap >/dev/null || missing+=(debootstrap)
if [ ${#missing[@]} -gt 0 ]; then
    say "installing ${missing[*]}"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
# The booted root shares the host's network: the agent's default port must be free.
if (exec 3<>/dev/tcp/127.0.0.1/1815) 2>/dev/null; then
    fail "port 1815 is in use on this machine; the packaged agent listens there"
fi
started=$SECONDS

# --- packages -------------------------------------------------------------------------------
target_dir=$(cargo metadata --format-version 1 --no-deps --locked |
    grep -o '"target_directory":"[^"]*"' | sed 's/.*:"//; s/"$//')
out=$target_dir/packages
version=$(cargo pkgid --locked -p nodecare-agent | sed 's/.*[#@]//')
agent_deb=nodecare-agent_${version}-1_amd64.deb
coordinator_deb=nodecare-coordinator_${version}-1_amd64.deb
if [ ! -s "$out/$agent_deb" ] || [ ! -s "$out/$coordinator_deb" ]; then
    say "no packages in $out: building them"
    packaging/build-packages.sh --out "$out"
fi

# --- boot -------------------------------------------------------------------------------------
lower=$(boot_cached_root) || fail "cannot make the $boot_release root"
trap boot_stop EXIT
boot_work=$(mktemp -d /tmp/nodecare-systemd.XXXXXX)
upper=$boot_work/upper
mkdir -p "$upper/root/packages" "$upper/var/lib/ganeti" "$upper/srv/nodecare-test-repo" "$upper/etc/apt"
cp "$out/$agent_deb" "$out/$coordinator_deb" "$upper/root/packages/"
cp tests/systemd/agent-flood.py "$upper/root/agent-flood.py"
# A Ganeti node's files the agent reads (and the packages must never remove).
head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$upper/var/lib/ganeti/hmac.key"
chmod 0400 "$upper/var/lib/ganeti/hmac.key"
# The node's package source: a file repository with the test package's new version.
make_test_package() { # VERSION DIR: a package with a setuid file; 2.0 needs a reboot
    local v=$1 dir=$2 d
    d=$(mktemp -d)
    mkdir -p "$d/DEBIAN" "$d/usr/lib/nodecare-test-upgrade"
    printf 'Package: nodecare-test-upgrade\nVersion: %s\nArchitecture: all\nMaintainer: nodecare tests <nodecare@example.invalid>\nDescription: package upgraded by the apt-upgrade-and-reboot hook in the boot test\n' "$v" >"$d/DEBIAN/control"
    if [ "$v" != 1.0 ]; then
        printf '#!/bin/sh\nset -e\n[ "$1" = configure ] && touch /var/run/reboot-required\nexit 0\n' >"$d/DEBIAN/postinst"
        chmod 0755 "$d/DEBIAN/postinst"
    fi
    echo "$v" >"$d/usr/lib/nodecare-test-upgrade/version"
    # Upgrades replace setuid programs (mount, passwd, sudo): the hook must be able to.
    cp /bin/true "$d/usr/lib/nodecare-test-upgrade/helper"
    chmod 4755 "$d/usr/lib/nodecare-test-upgrade/helper"
    dpkg-deb --root-owner-group -Zgzip --build "$d" "$dir/nodecare-test-upgrade_${v}_all.deb" >/dev/null
    rm -rf "$d"
}
make_test_package 1.0 "$upper/root/packages"
make_test_package 2.0 "$upper/srv/nodecare-test-repo"
deb=$upper/srv/nodecare-test-repo/nodecare-test-upgrade_2.0_all.deb
{
    dpkg-deb --field "$deb"
    echo "Filename: ./$(basename "$deb")"
    echo "Size: $(stat -c %s "$deb")"
    echo "SHA256: $(sha256sum "$deb" | cut -d' ' -f1)"
    echo
} >"$upper/srv/nodecare-test-repo/Packages"
echo 'deb [trusted=yes] file:/srv/nodecare-test-repo ./' >"$upper/etc/apt/sources.list"

boot_start "$lower" || fail "the root did not boot"
say "booted $boot_release, systemd $(in_root systemctl --version | head -n 1 | cut -d' ' -f2) as PID 1 in $((SECONDS - started)) s"
in_root systemctl is-active systemd-journald dbus >/dev/null || fail "journald or dbus is not active"

# --- 1. install -------------------------------------------------------------------------------
in_root dpkg -i /root/packages/nodecare-test-upgrade_1.0_all.deb >/dev/null
# The README's installation, exactly.
in_root sh -c "cd /root/packages && apt install -y ./$agent_deb" >"$boot_work/apt.log" 2>&1 ||
    { cat "$boot_work/apt.log" >&2; fail "apt install ./$agent_deb failed"; }
in_root sh -c "cd /root/packages && apt install -y ./$coordinator_deb" >>"$boot_work/apt.log" 2>&1 ||
    { cat "$boot_work/apt.log" >&2; fail "apt install ./$coordinator_deb failed"; }
[ "$(in_root systemctl is-enabled nodecare-agent)" = enabled ] || fail "nodecare-agent is not enabled"
[ "$(in_root systemctl is-enabled nodecare-coordinator)" = enabled ] || fail "nodecare-coordinator is not enabled"
agent_active=
for _ in $(seq 1 100); do
    agent_active=$(in_root systemctl is-active nodecare-agent || true)
    [ "$agent_active" = active ] && break
    sleep 0.2
done
[ "$agent_active" = active ] || fail "nodecare-agent is $agent_active after apt install, not active (READY=1 missing?)"
[ "$(in_root systemctl is-active nodecare-coordinator || true)" = inactive ] ||
    fail "the package started nodecare-coordinator (it must only enable it)"
in_root systemctl status --no-pager nodecare-agent >/dev/null || fail "systemctl status nodecare-agent is not 0"
journal=$(in_root journalctl --no-pager -o cat -u nodecare-agent)
grep -q 'Started nodecare-agent.service\|Started nodecare agent' <<<"$journal" ||
    fail "the journal does not say the agent started (READY=1): $journal"
grep -q 'INFO\|listening' <<<"$journal" || fail "journalctl -u nodecare-agent shows no log of the agent: $journal"
grep -q $'\e\[' <<<"$journal" && fail "the agent's journal has terminal colour codes: $journal"
say "1. apt install: agent enabled, started, READY=1; coordinator enabled, not started; journal readable"

# A deliberate unit defect (see the header), before any check of the unit.
if [ -n "${NODECARE_SYSTEMD_BREAK:-}" ]; then
    say "breaking the agent's unit on purpose: ${NODECARE_SYSTEMD_BREAK}"
    mkdir -p "$boot_root/etc/systemd/system/nodecare-agent.service.d"
    printf '[Service]\n%s\n' "$NODECARE_SYSTEMD_BREAK" >"$boot_root/etc/systemd/system/nodecare-agent.service.d/broken.conf"
    in_root systemctl daemon-reload
    in_root systemctl restart nodecare-agent
fi

# --- 4. limits and settings in force ------------------------------------------------------------
# journal_has UNIT PATTERN: the unit's journal has a line matching PATTERN (case-insensitive).
journal_has() { grep -qi -- "$2" <<<"$(in_root journalctl --no-pager -o cat -u "$1")"; }
show() { in_root systemctl show -p "$2" --value "$1"; }
check_watchdog() {
    [ "$(show "$1" WatchdogUSec)" = "$(sed -n 's/^WatchdogSec=//p' "packaging/systemd/$1.service")" ] ||
        fail "$1: WatchdogUSec $(show "$1" WatchdogUSec) is not the unit's WatchdogSec"
}
for unit in nodecare-agent nodecare-coordinator; do
    file=packaging/systemd/$unit.service
    [ "$(show "$unit" Type)" = notify ] || fail "$unit: Type is not notify"
    # The watchdog in force (systemd reports it for a running unit; the coordinator's in 7a).
    if [ "$unit" = nodecare-agent ]; then check_watchdog "$unit"; fi
    while IFS='=' read -r key value; do
        case "$key" in
            LimitNOFILE) [ "$(show "$unit" LimitNOFILE)" = "$value" ] || fail "$unit: LimitNOFILE is $(show "$unit" LimitNOFILE), the unit says $value" ;;
            MemoryMax | MemoryHigh | TasksMax | CPUQuota | CPUWeight)
                [ -n "$(show "$unit" "${key/CPUQuota/CPUQuotaPerSecUSec}")" ] || fail "$unit: $key not in force" ;;
        esac
    done < <(grep -E '^(LimitNOFILE|MemoryMax|MemoryHigh|TasksMax|CPUQuota|CPUWeight)=' "$file")
done
agent_pid=$(show nodecare-agent MainPID)
if grep -q '^LimitNOFILE=' packaging/systemd/nodecare-agent.service; then
    want=$(sed -n 's/^LimitNOFILE=//p' packaging/systemd/nodecare-agent.service)
    grep -q "^Max open files *${want##*:} " "$boot_root/proc/$agent_pid/limits" ||
        fail "the agent process's open files limit is not $want: $(grep 'open files' "$boot_root/proc/$agent_pid/limits")"
fi
say "4. the units' settings are in force (systemctl show; the agent's /proc/PID/limits)"

# --- 4b. connection floods against the agent under its unit ----------------------------------------
# The caps and timeouts as agent/src/limits.rs sets them; the total cap as the agent derives it
# from the unit's LimitNOFILE (its soft limit less a reserve, at most MAX_CONNECTIONS).
limit_const() { sed -n "s/^pub const $1: [a-zA-Z0-9]* = \(Duration::from_secs(\)\{0,1\}\([0-9_]*\).*/\2/p" agent/src/limits.rs | tr -d _; }
max_connections=$(limit_const MAX_CONNECTIONS)
reserve=$(limit_const DESCRIPTOR_RESERVE)
nofile=$(sed -n 's/^LimitNOFILE=\([0-9]*\).*/\1/p' packaging/systemd/nodecare-agent.service)
for value in "$max_connections" "$reserve" "$nofile"; do
    [ -n "$value" ] || fail "cannot read the agent's limits from agent/src/limits.rs and its unit"
done
if [ $((nofile - reserve)) -lt "$max_connections" ]; then max_connections=$((nofile - reserve)); fi
# The slots only the cluster's own callers may take (a quarter of a lowered total at most).
reserved=$(limit_const RESERVED_CONNECTIONS)
[ -n "$reserved" ] || fail "cannot read RESERVED_CONNECTIONS from agent/src/limits.rs"
if [ $((max_connections / 4)) -lt "$reserved" ]; then reserved=$((max_connections / 4)); fi
agent_pid=$(show nodecare-agent MainPID)
restarts=$(show nodecare-agent NRestarts)
flood_args=("$max_connections" "$(limit_const MAX_CONNECTIONS_PER_PEER)" "$(limit_const HEADER_READ_TIMEOUT)" \
    "$(limit_const IDLE_TIMEOUT)" "$agent_pid" "$reserved")
flood_started=$SECONDS
flood=$(in_root python3 /root/agent-flood.py 1815 "${flood_args[@]}" 2>&1) ||
    fail "the agent under its unit did not survive the connection floods: $flood"
[ "$(in_root systemctl is-active nodecare-agent || true)" = active ] || fail "nodecare-agent is not active after the floods"
[ "$(show nodecare-agent MainPID)" = "$agent_pid" ] && [ "$(show nodecare-agent NRestarts)" = "$restarts" ] ||
    fail "nodecare-agent was restarted during the floods (PID $agent_pid -> $(show nodecare-agent MainPID))"
refused=$(in_root curl -fsS --max-time 5 http://127.0.0.1:1815/metrics |
    sed -n 's/^nodecare_agent_requests_refused_total{endpoint="connection"[^}]*} \([0-9]*\)\(\.0\)\{0,1\}$/\1/p' | head -n 1)
[ "${refused:-0}" -ge 48 ] || fail "the agent's /metrics counts ${refused:-no} refused connections, not the flood's 48 and more"
say "4b. floods (caps ${flood_args[*]:0:2}, ${reserved} reserved, timeouts ${flood_args[*]:2:2} s): the agent kept answering, was not restarted; $flood; $refused connections refused (/metrics); $((SECONDS - flood_started)) s"

# --- 2. the agent under its unit ---------------------------------------------------------------
# Short intervals so the test need not wait minutes: an operator's change of the conffile.
cat >>"$boot_root/etc/nodecare/agent.toml" <<'EOF'

# boot test
diagnose_interval_secs = 3
diagnose_timeout_secs = 3
EOF
in_root nodecare-agent --config /etc/nodecare/agent.toml --check-config >/dev/null || fail "the changed agent.toml is rejected"
touch "$boot_root/root/write-marker"
sleep 1
for script in always-ok filesystems memory-pressure; do
    in_root install -o root -g root -m 0755 "/usr/share/nodecare/examples/diagnose/$script" \
        "/etc/ganeti/node-diagnose-commands/$script"
done
# A script that hangs, with a child of its own: both must be killed at the time limit.
printf '#!/bin/sh\nsleep 997 &\nsleep 998\n' >"$boot_root/etc/ganeti/node-diagnose-commands/hangs"
chmod 0755 "$boot_root/etc/ganeti/node-diagnose-commands/hangs"
in_root systemctl restart nodecare-agent
report=
for _ in $(seq 1 60); do
    report=$(in_root curl -fsS --max-time 5 http://127.0.0.1:1815/1/report/node/diagnose 2>/dev/null || true)
    grep -q hangs <<<"$report" && grep -q memory-pressure <<<"$report" && break
    sleep 0.5
done
for script in always-ok filesystems memory-pressure hangs; do
    grep -q "$script" <<<"$report" || fail "the agent's report does not name $script: $report"
done
signed=$(in_root curl -fsS --max-time 5 http://127.0.0.1:1815/1/report/node/diagnose/signed || true)
grep -q hmac-sha256 <<<"$signed" || fail "the agent's verdict is not signed: $signed"
in_root nodecare-agent verify <<<"$signed" >/dev/null 2>&1 ||
    fail "nodecare-agent verify rejects the signed verdict: $signed"
grep -qi 'time limit\|timed out\|timeout' <<<"$report" || fail "the report does not say the hanging script timed out: $report"
# The script runs again every interval: the processes of one run must be gone after its limit.
running=
for _ in $(seq 1 40); do
    running=$(in_root pgrep -f 'sleep 99[78]' || true)
    [ -n "$running" ] && break
    sleep 0.25
done
[ -n "$running" ] || fail "the hanging script is not running"
sleep 5
for pid in $running; do
    if in_root kill -0 "$pid" 2>/dev/null; then
        fail "a process of the hanging script outlived its time limit: $(in_root ps -o pid,etimes,args -p "$pid")"
    fi
done
say "2a. diagnose: example scripts run, the verdict is signed, a hanging script is killed with its child"

# The unit's sandbox: every [Service] setting of the installed unit that shapes the process
# (not the service's life cycle), for a transient unit that runs a repair command as the
# agent would (`nodecare-agent repair`: the daemon's environment, lock and verdict on stdin).
unit_sandbox() { # UNIT: sets sandbox to the -p options of UNIT's [Service] settings (drop-ins too)
    local line
    sandbox=()
    while IFS= read -r line; do
        case "$line" in
            Type=* | NotifyAccess=* | ExecStart=* | Restart* | WatchdogSec=* | TimeoutStopSec=* | \
                Standard*=* | SyslogIdentifier=* | KillMode=*) ;;
            *=*) sandbox+=(-p "$line") ;;
        esac
    done < <(in_root systemctl cat "$1" | sed -n '/^\[Service\]/,/^\[/p' | grep -E '^[A-Za-z]+=')
}
# probe_sandbox UNIT EXPECTATION...: runs each probe in a transient unit with UNIT's sandbox and
# fails unless it came out as expected. An EXPECTATION is "allowed|forbidden NAME SHELL-COMMAND":
# the command succeeds where allowed and fails where forbidden. Probes are harmless where they
# succeed (the hostname is set to itself).
probe_sandbox() {
    local unit=$1 expectation want name command result
    shift
    unit_sandbox "$unit"
    for expectation in "$@"; do
        read -r want name command <<<"$expectation"
        if in_root systemd-run --quiet --wait --pipe --collect --unit="nodecare-test-probe-$name" \
            "${sandbox[@]}" /bin/sh -c "$command" >/dev/null 2>&1; then
            result=allowed
        else
            result=forbidden
        fi
        [ "$result" = "$want" ] || fail "$unit's sandbox: '$command' ($name) is $result, expected $want"
    done
}
unit_sandbox nodecare-agent
say "the agent unit's sandbox: ${sandbox[*]}"
run_repair() { # NAME INPUT-JSON: runs the example repair NAME in the agent unit's sandbox
    local name=$1 input=$2
    in_root install -o root -g root -m 0755 "/usr/share/nodecare/examples/repair/$name" \
        "/etc/ganeti/node-repair-commands/$name"
    printf '%s\n' "$input" | in_root systemd-run --quiet --wait --pipe --collect \
        --unit="nodecare-test-repair-$name" "${sandbox[@]}" \
        /usr/bin/nodecare-agent --config /etc/nodecare/agent.toml repair --command "$name" --input -
}
verdict='{"status":"Warning","details":{"drop_caches":"pagecache"}}'
output=$(run_repair drop-caches "$verdict" 2>&1) || fail "the drop-caches example failed under the unit's sandbox: $output"
say "2b. repair drop-caches ran with the verdict on stdin under the unit's sandbox"

# The campaign hook: a real upgrade from the file repository, then the reboot via systemd-run.
# reboot.target is masked so that the scheduled reboot runs and fails instead of ending the test
# (`systemctl reboot` runs in the scheduled unit and is refused).
in_root systemctl mask reboot.target >/dev/null 2>&1
context='{"kind":"maintenance","hook":"apt-upgrade-and-reboot","campaign":"boot-test","node":"node1","group":0,"groups_total":1}'
output=$(run_repair apt-upgrade-and-reboot "$context" 2>&1) ||
    fail "apt-upgrade-and-reboot failed under the agent unit's sandbox: $output"
[ "$(cat "$boot_root/usr/lib/nodecare-test-upgrade/version")" = 2.0 ] ||
    fail "apt-upgrade-and-reboot did not upgrade the test package: $output"
[ "$(stat -c %a "$boot_root/usr/lib/nodecare-test-upgrade/helper")" = 4755 ] ||
    fail "the upgrade lost the setuid bit of the test package's program"
grep -q 'reboot in 5s' <<<"$output" || fail "apt-upgrade-and-reboot did not schedule the reboot: $output"
rebooted=
for _ in $(seq 1 60); do
    if journal_has nodecare-maintenance-reboot.service 'Main process exited\|reboot.target.*masked\|Call to Reboot failed'; then
        rebooted=yes
        break
    fi
    sleep 0.5
done
[ -n "$rebooted" ] || fail "the reboot scheduled with systemd-run did not run: $(in_root journalctl --no-pager -o cat -u nodecare-maintenance-reboot.service)"
in_root systemctl unmask reboot.target >/dev/null 2>&1
say "2c. apt-upgrade-and-reboot upgraded a package (setuid file included) and its reboot ran via systemd-run"

# Where the daemon wrote: only its state directory, the journal, /run and its private /tmp.
written=$(in_root find / -xdev -newer /root/write-marker -type f \
    ! -path '/var/lib/nodecare/*' ! -path '/var/log/journal/*' ! -path '/var/lib/systemd/*' \
    ! -path '/etc/systemd/system/*' ! -path '/root/*' \
    ! -path '/etc/ganeti/node-*-commands/*' ! -path '/var/lib/dpkg/*' ! -path '/var/lib/apt/*' \
    ! -path '/var/cache/*' ! -path '/var/log/apt/*' ! -path '/var/log/dpkg.log' \
    ! -path '/var/run/reboot-required' ! -path '/run/*' ! -path '/usr/lib/nodecare-test-upgrade/*' \
    ! -path '/etc/nodecare/agent.toml' 2>/dev/null || true)
[ -z "$written" ] || fail "the agent wrote outside its state directory: $written"
for path in sequence; do
    [ -e "$boot_root/var/lib/nodecare/agent/$path" ] || fail "no /var/lib/nodecare/agent/$path"
done
say "2d. the agent wrote only in /var/lib/nodecare (and the journal)"

# What the agent's sandbox forbids (and that it still allows what repairs need), each probe in a
# transient unit with the installed unit's [Service] settings.
touch "$boot_root/tmp/nodecare-test-host-tmp"
probe_sandbox nodecare-agent \
    "forbidden hostname hostname \"\$(hostname)\"" \
    "forbidden realtime chrt -f 1 true" \
    "forbidden personality setarch linux32 true" \
    "forbidden shared-tmp test -e /tmp/nodecare-test-host-tmp" \
    "allowed no-new-privileges grep -qx 'NoNewPrivs:[[:space:]]*1' /proc/self/status" \
    "allowed write-usr touch /usr/lib/nodecare-test-upgrade/probe" \
    "allowed write-sys-proc test -w /proc/sys/vm/drop_caches" \
    "allowed all-capabilities test \"\$(grep CapBnd /proc/self/status)\" = \"\$(grep CapBnd /proc/1/status)\"" \
    "allowed devices test -e /dev/null -a -e /dev/kmsg"
rm -f "$boot_root/tmp/nodecare-test-host-tmp" "$boot_root/usr/lib/nodecare-test-upgrade/probe"
say "2e. the agent's sandbox forbids renaming the node, real-time scheduling, personality changes, the shared /tmp; keeps root's capabilities, /usr, /proc/sys, /dev writable or usable"

# --- 3. watchdog --------------------------------------------------------------------------------
seq_before=$(cat "$boot_root/var/lib/nodecare/agent/sequence")
old_pid=$(show nodecare-agent MainPID)
watchdog=$(sed -n 's/^WatchdogSec=\([0-9]*\)s$/\1/p' packaging/systemd/nodecare-agent.service)
restart_sec=$(sed -n 's/^RestartSec=\([0-9]*\)s$/\1/p' packaging/systemd/nodecare-agent.service)
frozen_at=$SECONDS
in_root kill -STOP "$old_pid"
new_pid=$old_pid
while [ $((SECONDS - frozen_at)) -le $((watchdog + restart_sec + 15)) ]; do
    sleep 1
    new_pid=$(show nodecare-agent MainPID)
    [ "$new_pid" != "$old_pid" ] && [ "$new_pid" != 0 ] &&
        [ "$(in_root systemctl is-active nodecare-agent || true)" = active ] && break
done
[ "$new_pid" != "$old_pid" ] && [ "$new_pid" != 0 ] ||
    fail "systemd did not restart the frozen agent within $((watchdog + restart_sec + 15)) s"
took=$((SECONDS - frozen_at))
journal_has nodecare-agent 'watchdog timeout' ||
    fail "the journal does not say the agent was restarted for its watchdog (after $took s): $(in_root journalctl --no-pager -o cat -u nodecare-agent | tail -n 15)"
# The last ping came at most WatchdogSec/2 before the stop.
[ "$took" -ge "$((watchdog / 2 - 2))" ] || fail "the agent was restarted after $took s, before its watchdog ($watchdog s) could fire"
sleep 4
seq_after=$(cat "$boot_root/var/lib/nodecare/agent/sequence")
[ "$seq_after" -ge "$seq_before" ] || fail "the sequence number went back: $seq_before -> $seq_after"
say "3. watchdog: the frozen agent was killed and restarted after $took s; sequence $seq_before -> $seq_after"

# What the coordinator's store holds: its schema version, every table's rows, its counters (python3's sqlite3).
store_state() {
    in_root python3 -c '
import json, sqlite3
db = sqlite3.connect("file:/var/lib/nodecare/state.db?mode=ro", uri=True)
tables = [r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = ?", ("table",))]
print(json.dumps({"user_version": db.execute("PRAGMA user_version").fetchone()[0],
                  "rows": {t: db.execute(f"SELECT count(*) FROM \"{t}\"").fetchone()[0] for t in sorted(tables)},
                  "counters": dict(db.execute("SELECT name, value FROM counters"))}, sort_keys=True))'
}
# store_kept BEFORE INODE: the store is the same file (not made anew) and lost nothing: its
# schema version, every table's rows and every counter at least what they were.
store_kept() {
    local after
    [ "$(stat -c %i "$boot_root/var/lib/nodecare/state.db")" = "$2" ] || { echo "state.db was made anew" >&2; return 1; }
    after=$(store_state) || return 1
    python3 - "$1" "$after" <<'PY'
import json, sys
before, after = json.loads(sys.argv[1]), json.loads(sys.argv[2])
assert after["user_version"] >= before["user_version"], f"schema version {before['user_version']} -> {after['user_version']}"
for table, rows in before["rows"].items():
    assert after["rows"].get(table, -1) >= rows, f"table {table}: {rows} -> {after['rows'].get(table)} rows"
for name, value in before["counters"].items():
    assert after["counters"].get(name, -1) >= value, f"counter {name}: {value} -> {after['counters'].get(name)}"
PY
}

# --- 7. the coordinator: stands by, takes over, watchdog -----------------------------------------
# A simulated Ganeti RAPI (HTTPS, credentials) on the host's loopback, which the root shares.
sim=$target_dir/release/nodecare-ganeti-sim
if [ ! -x "$sim" ]; then
    say "building nodecare-ganeti-sim"
    cargo build --release --locked -p nodecare-ganeti-sim >/dev/null 2>&1 || fail "cannot build nodecare-ganeti-sim"
fi
sim_credentials=$boot_work/rapi-credentials
echo "nodecare:$(head -c 12 /dev/urandom | od -An -tx1 | tr -d ' \n')" >"$sim_credentials"
sim_pid=
trap 'if [ -n "$sim_pid" ]; then kill "$sim_pid" 2>/dev/null || true; fi; boot_stop' EXIT
start_sim() { # DIR [ARGS...]: starts a simulated RAPI (sim_pid, sim_url; DIR/rapi.pem, DIR/log)
    local dir=$1
    shift
    mkdir -p "$dir"
    "$sim" --tls-dir "$dir" --credentials "$sim_credentials" --url-file "$dir/url" \
        --job-delay-ms 50 "$@" >"$dir/log" 2>&1 &
    sim_pid=$!
    for _ in $(seq 1 100); do [ -s "$dir/url" ] && break; sleep 0.1; done
    [ -s "$dir/url" ] || fail "the simulated RAPI did not start: $(cat "$dir/log")"
    sim_url=$(cat "$dir/url")
    install -m 0600 "$dir/rapi.pem" "$boot_root/var/lib/ganeti/rapi.pem"
}
# rapi METHOD PATH [CURL-ARGS...]: a request to the simulated RAPI, as an operator's tool makes it.
rapi() {
    local method=$1 path=$2
    shift 2
    curl -fsS --max-time 5 -k -X "$method" -u "$(cat "$sim_credentials")" "$@" "$sim_url$path"
}
sim_dir=$boot_work/sim
start_sim "$sim_dir"
install -m 0600 "$sim_credentials" "$boot_root/etc/nodecare/rapi-credentials"
# This node is node1 of the simulated cluster; ssconf says the master is node2: stand by.
echo node2.sim.test >"$boot_root/var/lib/ganeti/ssconf_master_node"
# The operator's edit of the shipped coordinator.toml: this node's name, RAPI (the simulator).
edit_coordinator_config() {
    local config=$boot_root/etc/nodecare/coordinator.toml
    {
        printf 'node_name = "node1.sim.test"\nround_interval = 2.0\nround_stall_timeout = 5.0\n'
        # No agents run on the simulated nodes: no replicated state to wait for at takeover.
        sed -e 's/^enabled = true$/enabled = false/' -e "s|^\[rapi\]\$|[rapi]\nurl = \"$sim_url\"\ncertificate = \"/var/lib/ganeti/rapi.pem\"\ncredentials = \"/etc/nodecare/rapi-credentials\"\ntimeout = 600.0|" "$config"
    } >"$config.new"
    mv "$config.new" "$config"
    chmod 0640 "$config"
    in_root nodecare-coordinator --config /etc/nodecare/coordinator.toml --check-config >/dev/null 2>&1 ||
        fail "the edited coordinator.toml is rejected: $(in_root nodecare-coordinator --config /etc/nodecare/coordinator.toml --check-config 2>&1)"
}
edit_coordinator_config
in_root systemctl start nodecare-coordinator || fail "systemctl start nodecare-coordinator failed"
[ "$(in_root systemctl is-active nodecare-coordinator)" = active ] || fail "nodecare-coordinator is not active (READY=1)"
waited=
for _ in $(seq 1 40); do
    journal_has nodecare-coordinator 'standing by' && { waited=yes; break; }
    sleep 0.5
done
[ -n "$waited" ] || fail "the coordinator on a master candidate does not stand by"
check_watchdog nodecare-coordinator
say "7a. the coordinator on a node that is not the master is active and stands by"
# `gnt-cluster master-failover` to this node: ssconf names it, RAPI (which says node1) answers here.
echo node1.sim.test >"$boot_root/var/lib/ganeti/ssconf_master_node"
waited=
for _ in $(seq 1 60); do
    journal_has nodecare-coordinator 'this node is the master: acting' && { waited=yes; break; }
    sleep 0.5
done
[ -n "$waited" ] || fail "the coordinator did not take over when the master moved to its node: $(in_root journalctl --no-pager -o cat -u nodecare-coordinator | tail -n 12)"
[ "$(in_root systemctl is-active nodecare-coordinator)" = active ] || fail "the coordinator is not active after taking over"
say "7b. the coordinator took over when the master moved to its node"

# What the coordinator's sandbox forbids, and allows, each probe in a transient unit with the
# installed unit's [Service] settings.
probe_sandbox nodecare-coordinator \
    "allowed write-state touch /var/lib/nodecare/probe" \
    "allowed read-config test -r /etc/nodecare/coordinator.toml -a -r /var/lib/ganeti/rapi.pem" \
    "forbidden write-etc touch /etc/nodecare/probe" \
    "forbidden write-usr touch /usr/probe" \
    "forbidden write-ganeti touch /var/lib/ganeti/probe" \
    "forbidden home ls /root/packages" \
    "forbidden devices test -e /dev/kmsg" \
    "forbidden kernel-tunables : >/proc/sys/vm/drop_caches" \
    "allowed only-cap-dac-read-search grep -qx 'CapBnd:[[:space:]]*0000000000000004' /proc/self/status" \
    "forbidden namespaces unshare --user true" \
    "forbidden write-execute python3 -c 'import mmap; mmap.mmap(-1, 4096, prot=7)'" \
    "forbidden hostname hostname \"\$(hostname)\""
rm -f "$boot_root/var/lib/nodecare/probe"
say "7c. the coordinator's sandbox writes only its state directory, reads its configuration and the RAPI certificate; forbids /etc, /usr, /var/lib/ganeti writes, /root, devices, /proc/sys, capabilities but CAP_DAC_READ_SEARCH, namespaces, W+X memory, renaming the node"

# Its round loop frozen: RAPI never answers (within the coordinator's 600 s RAPI timeout).
store_before=$(store_state) || fail "cannot read the coordinator's store"
store_inode=$(stat -c %i "$boot_root/var/lib/nodecare/state.db")
old_pid=$(show nodecare-coordinator MainPID)
rapi POST /sim/http-faults -d '{"hang": 100000, "hang_ms": 900000}' >/dev/null || fail "cannot make the simulated RAPI hang"
watchdog=$(sed -n 's/^WatchdogSec=\([0-9]*\)s$/\1/p' packaging/systemd/nodecare-coordinator.service)
restart_sec=$(sed -n 's/^RestartSec=\([0-9]*\)s$/\1/p' packaging/systemd/nodecare-coordinator.service)
frozen_at=$SECONDS
# Killed by systemd: the journal says why (round_stall_timeout, then WatchdogSec without a ping).
killed=
while [ $((SECONDS - frozen_at)) -le $((5 + watchdog + 20)) ]; do
    sleep 1
    journal_has nodecare-coordinator 'watchdog timeout' && { killed=yes; break; }
done
[ -n "$killed" ] || fail "systemd did not kill the coordinator whose rounds hang (no watchdog timeout in its journal)"
took=$((SECONDS - frozen_at))
[ "$took" -le $((5 + watchdog + 5)) ] || fail "the coordinator was killed after $took s, not within round_stall_timeout + WatchdogSec"
# RAPI answers again before the restart (RestartSec), so that the new process's rounds do not
# hang too (a coordinator stuck in a RAPI request does not stop within TimeoutStopSec).
rapi POST /sim/http-faults -d '{"hang": 0}' >/dev/null || fail "cannot stop the simulated RAPI's hang"
new_pid=$old_pid
while [ $((SECONDS - frozen_at)) -le $((took + restart_sec + 20)) ]; do
    sleep 1
    new_pid=$(show nodecare-coordinator MainPID)
    [ "$new_pid" != "$old_pid" ] && [ "$new_pid" != 0 ] && break
done
[ "$new_pid" != "$old_pid" ] && [ "$new_pid" != 0 ] ||
    fail "systemd did not restart the coordinator after its watchdog killed it"
restarted=$((SECONDS - frozen_at))
for _ in $(seq 1 60); do
    [ "$(in_root systemctl is-active nodecare-coordinator || true)" = active ] && break
    sleep 0.5
done
[ "$(in_root systemctl is-active nodecare-coordinator || true)" = active ] || fail "the restarted coordinator is not active"
store_kept "$store_before" "$store_inode" || fail "the coordinator's store was not kept across its watchdog restart"
say "3b. watchdog: the coordinator with a hanging RAPI was killed after $took s (journal: watchdog timeout), restarted after $restarted s; its store is kept"

# --- 6. remove and purge ----------------------------------------------------------------------
in_root apt remove -y nodecare-agent nodecare-coordinator >"$boot_work/apt.log" 2>&1 ||
    { cat "$boot_work/apt.log" >&2; fail "apt remove failed"; }
for unit in nodecare-agent nodecare-coordinator; do
    state=$(in_root systemctl is-active "$unit" || true)
    [ "$state" = inactive ] || [ "$state" = unknown ] || fail "$unit is $state after apt remove"
done
in_root pgrep -x nodecare-agent >/dev/null && fail "a nodecare-agent process survived apt remove"
for path in /etc/nodecare/agent.toml /etc/nodecare/coordinator.toml /var/lib/nodecare/agent/sequence \
    /etc/ganeti/node-diagnose-commands/always-ok; do
    [ -e "$boot_root$path" ] || fail "apt remove removed $path"
done
grep -q 'diagnose_interval_secs = 3' "$boot_root/etc/nodecare/agent.toml" || fail "apt remove changed the operator's agent.toml"
in_root apt purge -y nodecare-agent nodecare-coordinator >"$boot_work/apt.log" 2>&1 ||
    { cat "$boot_work/apt.log" >&2; fail "apt purge failed"; }
for path in /etc/nodecare/agent.toml /etc/nodecare/coordinator.toml /var/lib/nodecare /usr/bin/nodecare-agent \
    /etc/systemd/system/multi-user.target.wants/nodecare-agent.service \
    /etc/systemd/system/multi-user.target.wants/nodecare-coordinator.service; do
    [ ! -e "$boot_root$path" ] || fail "apt purge left $path"
done
# The operator's RAPI credentials file (7) is not the package's: it stays.
[ "$(ls -A "$boot_root/etc/nodecare")" = rapi-credentials ] ||
    fail "after apt purge /etc/nodecare holds: $(ls -A "$boot_root/etc/nodecare")"
for path in /var/lib/ganeti/hmac.key /etc/ganeti/node-diagnose-commands/always-ok \
    /etc/ganeti/node-repair-commands/drop-caches; do
    [ -e "$boot_root$path" ] || fail "apt purge removed $path (not the package's)"
done
say "6. apt remove keeps configuration and state; apt purge removes the packages' files, not Ganeti's or the operator's"

# --- 5. upgrade from the previous release -------------------------------------------------------
# The previous release is packaging/fixtures/previous/ (see its README: built from an earlier
# commit, whose coordinator's store has an older schema; never rebuilt here). Under it, this
# node gets real state: an incident (the agent, as node2 of a simulated cluster, asks for an
# evacuation, which the coordinator carries out to the end), an instance repair in flight (its
# record in the old store's table, its jobs still running in Ganeti), the agent's sequence
# number. Then the upgrade, as packaging/README.md ("Upgrading") says, and what must hold after.
upgrade_started=$SECONDS
fixtures=packaging/fixtures/previous
prev_agent_deb=$(find "$fixtures" -name 'nodecare-agent_*_amd64.deb' | head -n 1)
prev_coordinator_deb=$(find "$fixtures" -name 'nodecare-coordinator_*_amd64.deb' | head -n 1)
[ -s "$prev_agent_deb" ] && [ -s "$prev_coordinator_deb" ] || fail "no previous release's packages in $fixtures"
prev=$(dpkg-deb --field "$prev_agent_deb" Version)
dpkg --compare-versions "$prev" lt "$version-1" || fail "the previous release $prev is not older than $version-1"
prev_schema=$(sed -n 's/^store schema: \([0-9]*\)$/\1/p' "$fixtures/README.md")
schema=$(sed -n 's/^const SCHEMA_VERSION: i64 = \([0-9]*\);$/\1/p' coordinator/src/store.rs)
[ -n "$prev_schema" ] && [ -n "$schema" ] || fail "cannot read the store schema versions ($fixtures/README.md, coordinator/src/store.rs)"
[ "$prev_schema" -lt "$schema" ] || fail "the previous release's store schema $prev_schema is not older than $schema: no migration to test"
cp "$prev_agent_deb" "$prev_coordinator_deb" "$boot_root/root/packages/"
in_root sh -c "cd /root/packages && apt install -y ./$(basename "$prev_agent_deb") ./$(basename "$prev_coordinator_deb")" \
    >"$boot_work/apt.log" 2>&1 || { cat "$boot_work/apt.log" >&2; fail "apt install of the previous release failed"; }

# A cluster of its own: node2's and node3's instances can move (sharedfile), jobs take 50 ms.
kill "$sim_pid" 2>/dev/null || true
start_sim "$boot_work/sim5" --instances inst1:sharedfile:1,inst2:sharedfile:2,inst3:sharedfile:3
# The operator's changes of both configuration files. The agent: this node is node2, its one
# diagnose script prints the verdict written below.
cat >>"$boot_root/etc/nodecare/agent.toml" <<'TOML'

# the operator
node_name = "node2.sim.test"
diagnose_command = "verdict"
diagnose_interval_secs = 3
TOML
mkdir -p "$boot_root/var/lib/nodecare-test"
echo '{"status":"evacuate","details":{"disk":"/dev/sdb","smart":"reallocated sectors rising"}}' \
    >"$boot_root/var/lib/nodecare-test/verdict.json"
printf '#!/bin/sh\nexec cat /var/lib/nodecare-test/verdict.json\n' >"$boot_root/etc/ganeti/node-diagnose-commands/verdict"
chmod 0755 "$boot_root/etc/ganeti/node-diagnose-commands/verdict"
in_root nodecare-agent --config /etc/nodecare/agent.toml --check-config >/dev/null || fail "the changed agent.toml is rejected by $prev"
# The coordinator: as in 7, plus node2's agent here (the other nodes' refuse connections, and
# the breaker is told to bear that), two disrupted nodes and one healthy node at the least (an
# evacuated node and a drained one), instance repair on.
edit_coordinator_config
config=$boot_root/etc/nodecare/coordinator.toml
{
    printf 'max_disrupted_nodes = 2\nmin_healthy_nodes = 1\n'
    sed -e 's|^\[agents.overrides\]$|&\n"node1.sim.test" = "http://127.0.0.1:1"\n"node2.sim.test" = "http://127.0.0.1:1815"\n"node3.sim.test" = "http://127.0.0.1:1"|' \
        -e 's|^\[instance_repair\]$|&\nenabled = true|' "$config"
    printf '\n[breaker]\nmax_unreachable_percent = 100.0\n'
} >"$config.new"
mv "$config.new" "$config"
chmod 0640 "$config"
in_root nodecare-coordinator --config /etc/nodecare/coordinator.toml --check-config >/dev/null 2>&1 ||
    fail "the changed coordinator.toml is rejected by $prev: $(in_root nodecare-coordinator --config /etc/nodecare/coordinator.toml --check-config 2>&1)"
in_root systemctl restart nodecare-agent
in_root systemctl start nodecare-coordinator || fail "the previous release's coordinator does not start"

# The incident: node2's evacuation, carried out to the end (drained, emptied, offline, tagged).
coordinator_status() { curl -fsS --max-time 5 http://127.0.0.1:1816/1/status; }
incident_of() { # STATUS-JSON NODE: "id repair-status jobs" of NODE's incident
    python3 -c '
import json, sys
for i in json.loads(sys.argv[1]):
    if i["node"] == sys.argv[2]:
        print(i["id"], i["repair-status"], "+".join(str(j) for j in sorted(i["jobs"])))' "$1" "$2"
}
incident=
for _ in $(seq 1 120); do
    incident=$(incident_of "$(coordinator_status 2>/dev/null || echo '[]')" node2.sim.test)
    [ "$(cut -d' ' -f2 <<<"$incident")" = completed ] && break
    sleep 0.5
done
[ "$(cut -d' ' -f2 <<<"$incident")" = completed ] ||
    fail "the previous release did not complete node2's evacuation: ${incident:-no incident}; status: $(coordinator_status 2>&1)"
[ -n "$(cut -d' ' -f3 <<<"$incident")" ] || fail "node2's incident has no jobs: $incident"

# The instance repair in flight: node3 drained by the operator, inst3 (sharedfile, on node3)
# tagged for automatic repair; the coordinator submits the migration and the pending tag, and
# Ganeti's jobs take an hour from then on, so the repair is still in flight at the upgrade.
rapi PUT /2/nodes/node3.sim.test/role -H 'Content-Type: application/json' -d '"drained"' >/dev/null || fail "cannot drain node3"
for _ in $(seq 1 50); do
    rapi GET /2/nodes/node3.sim.test | grep -q '"drained": *true' && break
    sleep 0.2
done
rapi GET /2/nodes/node3.sim.test | grep -q '"drained": *true' || fail "node3 is not drained"
rapi PUT '/2/instances/inst3.sim.test/tags?tag=ganeti:watcher:autorepair:migrate' >/dev/null &&
    rapi POST /sim/job-delay -d '{"ms": 3600000}' >/dev/null || fail "cannot tag inst3 for repair"
# Every repair the old store records: "uuid instance job+job…" (the operations' and the pending tag's).
instance_repairs() {
    in_root python3 -c '
import json, sqlite3
db = sqlite3.connect("file:/var/lib/nodecare/state.db?mode=ro", uri=True)
if db.execute("SELECT count(*) FROM sqlite_master WHERE name = ?", ("instance_repairs",)).fetchone()[0]:
    for uuid, instance, text in db.execute("SELECT uuid, instance, record FROM instance_repairs"):
        r = json.loads(text)
        jobs = r.get("jobs", []) + [r.get("tag_job")]
        print(uuid, instance, "+".join("-" if j is None else str(j) for j in jobs))'
}
repair=
for _ in $(seq 1 120); do
    repair=$(instance_repairs 2>/dev/null || true)
    [ -n "$repair" ] && ! grep -q -- - <<<"$(cut -d' ' -f3 <<<"$repair")" && break
    sleep 0.5
done
[ "$(wc -l <<<"$repair")" = 1 ] && grep -q ' inst3.sim.test ' <<<"$repair" && ! grep -q -- - <<<"$(cut -d' ' -f3 <<<"$repair")" ||
    fail "the previous release recorded no instance repair of inst3 with all its jobs: '${repair}'; $(in_root journalctl --no-pager -o cat -u nodecare-coordinator | tail -n 15)"
repair_uuid=$(cut -d' ' -f1 <<<"$repair")
repair_jobs=$(cut -d' ' -f3 <<<"$repair")

# What the upgrade must keep.
sleep 3 # a round or two more in the store
store_before=$(store_state) || fail "cannot read the previous release's store"
[ "$(python3 -c 'import json, sys; print(json.loads(sys.argv[1])["user_version"])' "$store_before")" = "$prev_schema" ] ||
    fail "the previous release's store is not schema $prev_schema: $store_before"
store_inode=$(stat -c %i "$boot_root/var/lib/nodecare/state.db")
agent_sequences() { in_root python3 -c '
import sqlite3
db = sqlite3.connect("file:/var/lib/nodecare/state.db?mode=ro", uri=True)
print(db.execute("SELECT max(sequence) FROM agent_sequences").fetchone()[0] or 0)'; }
coordinator_seq_before=$(agent_sequences) || fail "cannot read the agents' sequence numbers from the store"
seq_before=$(cat "$boot_root/var/lib/nodecare/agent/sequence")
submissions_before=$(rapi GET /sim/submissions | python3 -c 'import json, sys; print(len(json.load(sys.stdin)))')
started_lines() { in_root journalctl --no-pager -o cat -u "$1" | grep -c '^Started ' || true; }
declare -A invocation_before started_before
for unit in nodecare-agent nodecare-coordinator; do
    [ "$(in_root systemctl is-active "$unit" || true)" = active ] || fail "the previous release's $unit is not active"
    invocation_before[$unit]=$(show "$unit" InvocationID)
    started_before[$unit]=$(started_lines "$unit")
done
say "5. under $prev: node2's incident ${incident}, inst3's repair $repair_uuid in flight (jobs $repair_jobs), store $store_before, agent sequence $seq_before"

# The upgrade, as packaging/README.md ("Upgrading") says.
in_root sh -c "cd /root/packages && apt install -y -o Dpkg::Options::=--force-confold ./$agent_deb ./$coordinator_deb" \
    >"$boot_work/apt.log" 2>&1 || { cat "$boot_work/apt.log" >&2; fail "the upgrade to $version-1 failed"; }
for package in nodecare-agent nodecare-coordinator; do
    [ "$(in_root dpkg-query -W -f '${Version}' "$package")" = "$version-1" ] || fail "$package is not $version-1 after the upgrade"
done
grep -q '^node_name = "node2.sim.test"$' "$boot_root/etc/nodecare/agent.toml" || fail "the upgrade replaced the operator's agent.toml"
grep -q '^node_name = "node1.sim.test"$' "$boot_root/etc/nodecare/coordinator.toml" &&
    grep -q '^max_unreachable_percent = 100.0$' "$boot_root/etc/nodecare/coordinator.toml" ||
    fail "the upgrade replaced the operator's coordinator.toml"
for conffile in agent.toml coordinator.toml; do
    cmp -s "$boot_root/etc/nodecare/$conffile.dpkg-dist" "packaging/config/$conffile" ||
        fail "the upgrade did not leave the new release's $conffile beside the operator's as $conffile.dpkg-dist"
done
# Each daemon restarted once (a new invocation, one more "Started" line), and by the package, not
# by a failure (NRestarts counts systemd's automatic restarts).
for unit in nodecare-agent nodecare-coordinator; do
    for _ in $(seq 1 40); do
        [ "$(in_root systemctl is-active "$unit" || true)" = active ] && break
        sleep 0.25
    done
    [ "$(in_root systemctl is-active "$unit" || true)" = active ] || fail "$unit is not active after the upgrade"
    [ "$(show "$unit" InvocationID)" != "${invocation_before[$unit]}" ] ||
        fail "$unit was not restarted by the upgrade (it runs the old binary)"
    starts=$(($(started_lines "$unit") - started_before[$unit]))
    [ "$starts" = 1 ] || fail "$unit was started $starts times by the upgrade, not once"
    [ "$(show "$unit" NRestarts)" = 0 ] || fail "$unit failed and was restarted by systemd during the upgrade"
done
sleep 6 # rounds of the new coordinator

# The store: the same file, migrated to this release's schema, nothing lost. The old table of
# instance repairs is gone; its record became ledger entries held by the repair, with its jobs.
store_after=$(store_state) || fail "cannot read the store after the upgrade"
python3 - "$store_before" "$store_after" "$schema" <<'PY' || fail "the upgrade did not migrate the store: $store_before -> $store_after"
import json, sys
before, after, schema = json.loads(sys.argv[1]), json.loads(sys.argv[2]), int(sys.argv[3])
assert after["user_version"] == schema, f"schema version {after['user_version']}, not {schema}"
assert "instance_repairs" not in after["rows"], "the instance_repairs table is still there"
for table, rows in before["rows"].items():
    if table != "instance_repairs":
        assert after["rows"].get(table, -1) >= rows, f"table {table}: {rows} -> {after['rows'].get(table)} rows"
for name, value in before["counters"].items():
    assert after["counters"].get(name, -1) >= value, f"counter {name}: {value} -> {after['counters'].get(name)}"
PY
[ "$(stat -c %i "$boot_root/var/lib/nodecare/state.db")" = "$store_inode" ] || fail "the upgrade made state.db anew"
ledger_jobs=$(in_root python3 -c '
import json, sqlite3, sys
db = sqlite3.connect("file:/var/lib/nodecare/state.db?mode=ro", uri=True)
jobs = [json.loads(r).get("job") for (r,) in db.execute("SELECT record FROM ledger WHERE holder = ?", ("instance-repair:" + sys.argv[1],))]
print("+".join(str(j) for j in sorted(j for j in jobs if j is not None)))' "$repair_uuid")
[ "$ledger_jobs" = "$(tr + '\n' <<<"$repair_jobs" | sort -n | paste -sd+)" ] ||
    fail "inst3's repair in flight did not become ledger entries with its jobs: ledger '$ledger_jobs', old record '$repair_jobs'"
# Nothing submitted twice: the new coordinator adopted the jobs in flight.
duplicates=$(rapi GET /sim/duplicates)
[ "$duplicates" = '[]' ] || fail "jobs were submitted twice after the upgrade: $duplicates"
submissions_after=$(rapi GET /sim/submissions | python3 -c 'import json, sys; print(len(json.load(sys.stdin)))')
[ "$submissions_after" = "$submissions_before" ] ||
    fail "the new coordinator submitted $((submissions_after - submissions_before)) job(s) for work the previous release had submitted"
# The incident, as the new release's API and CLI show it.
incident_after=$(incident_of "$(coordinator_status)" node2.sim.test)
[ "$incident_after" = "$incident" ] || fail "node2's incident changed across the upgrade: '$incident' -> '$incident_after'"
cli=$(in_root nodecare status 2>&1) || fail "nodecare status failed after the upgrade: $cli"
grep -q 'node2.sim.test' <<<"$cli" || fail "nodecare status does not show node2's incident after the upgrade: $cli"
# The sequence numbers: the agent's, and what the coordinator keeps of them.
seq_after=$(cat "$boot_root/var/lib/nodecare/agent/sequence")
[ "$seq_after" -ge "$seq_before" ] || fail "the agent's sequence number went back across the upgrade: $seq_before -> $seq_after"
coordinator_seq_after=$(agent_sequences)
[ "$coordinator_seq_after" -ge "$coordinator_seq_before" ] ||
    fail "the coordinator's record of the agents' sequence numbers went back: $coordinator_seq_before -> $coordinator_seq_after"
say "5. upgrade $prev -> $version-1 (--force-confold): the operator's agent.toml and coordinator.toml kept (new ones as .dpkg-dist), each daemon restarted once; store schema $prev_schema -> $schema, the same file, no row lost ($store_after); inst3's repair in flight now ledger entries with its jobs $repair_jobs, nothing submitted twice; node2's incident $incident_after; sequence $seq_before -> $seq_after (coordinator's $coordinator_seq_before -> $coordinator_seq_after); $((SECONDS - upgrade_started)) s"

say "OK in $((SECONDS - started)) s"
