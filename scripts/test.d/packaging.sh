#!/usr/bin/env bash
# Packaging test: builds the four packages (.deb and .rpm of nodecare-agent and
# nodecare-coordinator) with one release build, checks their contents and metadata, verifies the
# systemd units, installs the .debs, runs the agent exactly as its unit's ExecStart says with an
# example diagnose script enabled, queries it over HTTP, then removes and purges the packages
# and checks that nothing is left behind.
#
# Needs root (it installs packages); skips otherwise. Installs what it needs when missing:
# cargo-deb 3.8.0, and Debian's rpm (rpmbuild), rpmlint, systemd (systemd-analyze) and curl.
#
# The .rpm packages are checked at this level only (`rpm -qp`, `rpm -K`, rpmlint): no EL9 root
# can be made here (the machines reach Debian's package mirror, no EL9 repository), so they are
# never installed or booted; packaging/README.md says so.
set -euo pipefail
cd "$(dirname "$0")/../.."

say() { echo "packaging: $*"; }
fail() { echo "packaging: FAIL: $*" >&2; exit 1; }

if [ "$(id -u)" != 0 ]; then
    say "SKIP: needs root (installs and purges the packages)"
    exit 0
fi
if grep -q installed <<<"$(dpkg-query -W -f '${Status}\n' nodecare-agent nodecare-coordinator 2>/dev/null)" ||
    [ -e /etc/nodecare ] || [ -e /var/lib/nodecare ]; then
    say "SKIP: nodecare is already installed here (or /etc/nodecare, /var/lib/nodecare exist);" \
        "this test installs and purges the packages and would destroy that installation"
    exit 0
fi

# --- tools --------------------------------------------------------------------------------
command -v cargo-deb >/dev/null || cargo install --locked --version 3.8.0 cargo-deb
missing=()
command -v rpmbuild >/dev/null || missing+=(rpm)
command -v systemd-analyze >/dev/null || missing+=(systemd)
command -v curl >/dev/null || missing+=(curl)
command -v objdump >/dev/null || missing+=(binutils)
command -v rpmlint >/dev/null || missing+=(rpmlint)
if [ ${#missing[@]} -gt 0 ]; then
    say "installing ${missing[*]}"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

target_dir=$(cargo metadata --format-version 1 --no-deps --locked |
    grep -o '"target_directory":"[^"]*"' | sed 's/.*:"//; s/"$//')
out=$target_dir/packages
version=$(cargo pkgid --locked -p nodecare-agent | sed 's/.*[#@]//')
agent_port=1815

# --- build ----------------------------------------------------------------------------------
# NODECARE_PACKAGING_NO_BUILD=1 reuses an earlier release build (for reruns while developing).
started=$SECONDS
build_args=(--out "$out")
[ "${NODECARE_PACKAGING_NO_BUILD:-0}" = 1 ] && build_args+=(--no-build)
packaging/build-packages.sh "${build_args[@]}"
say "built the packages in $((SECONDS - started)) s"

agent_deb=$out/nodecare-agent_${version}-1_amd64.deb
coordinator_deb=$out/nodecare-coordinator_${version}-1_amd64.deb
agent_rpm=$out/nodecare-agent-${version}-1.x86_64.rpm
coordinator_rpm=$out/nodecare-coordinator-${version}-1.x86_64.rpm
for package in "$agent_deb" "$coordinator_deb" "$agent_rpm" "$coordinator_rpm"; do
    [ -s "$package" ] || fail "missing package $package"
done

release=$target_dir/release
glibc_floor=$(for bin in nodecare-agent nodecare-coordinator nodecare; do
    objdump -T "$release/$bin" | grep -o 'GLIBC_[0-9][0-9.]*' | sed 's/GLIBC_//'
done | sort -uV | tail -n 1)
grep -q "glibc $glibc_floor" packaging/README.md ||
    fail "the binaries need glibc >= $glibc_floor but packaging/README.md does not say so"

# --- package contents and metadata ----------------------------------------------------------
expect_lines() { # expect_lines WHAT LISTING LINE...
    local what=$1 listing=$2 line
    shift 2
    for line in "$@"; do
        grep -qxF -- "$line" <<<"$listing" || fail "$what lacks: $line"
    done
}
# Paths only, ./-prefix removed, directories without their trailing slash (tar reads all).
deb_paths() { dpkg-deb --fsys-tarfile "$1" | tar -t | sed 's|^\./|/|; s|/$||'; }

agent_files=(
    /usr/bin/nodecare-agent
    /etc/nodecare/agent.toml
    /usr/lib/systemd/system/nodecare-agent.service
    /usr/share/man/man8/nodecare-agent.8.gz
    /usr/share/bash-completion/completions/nodecare-agent
    /usr/share/fish/vendor_completions.d/nodecare-agent.fish
    /usr/share/nodecare/examples/README.md
)
coordinator_files=(
    /usr/bin/nodecare-coordinator
    /usr/bin/nodecare
    /etc/nodecare/coordinator.toml
    /usr/lib/systemd/system/nodecare-coordinator.service
    /usr/share/man/man8/nodecare-coordinator.8.gz
    /usr/share/man/man1/nodecare.1.gz
    /usr/share/bash-completion/completions/nodecare-coordinator
    /usr/share/bash-completion/completions/nodecare
    /usr/share/fish/vendor_completions.d/nodecare-coordinator.fish
    /usr/share/fish/vendor_completions.d/nodecare.fish
    /usr/share/nodecare/prometheus/nodecare.rules.yml
    /usr/share/nodecare/grafana/nodecare.json
)
expect_lines "agent .deb" "$(deb_paths "$agent_deb")" "${agent_files[@]}" \
    /usr/share/zsh/vendor-completions/_nodecare-agent
expect_lines "coordinator .deb" "$(deb_paths "$coordinator_deb")" "${coordinator_files[@]}" \
    /usr/share/zsh/vendor-completions/_nodecare-coordinator /usr/share/zsh/vendor-completions/_nodecare
for example in whitelist-examples/diagnose/* whitelist-examples/repair/*; do
    [ -f "$example" ] || continue
    expect_lines "agent .deb" "$(deb_paths "$agent_deb")" "/usr/share/nodecare/examples/${example#whitelist-examples/}"
done
for deb in "$agent_deb" "$coordinator_deb"; do
    depends=$(dpkg-deb --field "$deb" Depends)
    grep -qF "libc6 (>= $glibc_floor)" <<<"$depends" || fail "$deb: Depends '$depends' lacks libc6 (>= $glibc_floor)"
done
expect_lines "agent .deb conffiles" "$(dpkg-deb --ctrl-tarfile "$agent_deb" | tar -xO ./conffiles)" /etc/nodecare/agent.toml
expect_lines "coordinator .deb conffiles" "$(dpkg-deb --ctrl-tarfile "$coordinator_deb" | tar -xO ./conffiles)" /etc/nodecare/coordinator.toml

rpm_field() { rpm -qp --queryformat "%{$2}" "$1"; }
for rpm_file in "$agent_rpm" "$coordinator_rpm"; do
    grep -q "digests OK" <<<"$(rpm -K --nosignature "$rpm_file")" || fail "$rpm_file: bad digests"
    [ "$(rpm_field "$rpm_file" VERSION)" = "$version" ] || fail "$rpm_file: version is not $version"
    [ "$(rpm_field "$rpm_file" RELEASE)" = 1 ] || fail "$rpm_file: release is not 1"
    [ "$(rpm_field "$rpm_file" ARCH)" = x86_64 ] || fail "$rpm_file: arch is not x86_64"
    [ "$(rpm_field "$rpm_file" LICENSE)" = BSD-2-Clause ] || fail "$rpm_file: license is not BSD-2-Clause"
    requires=$(rpm -qp --requires "$rpm_file")
    expect_lines "$rpm_file requires" "$requires" "glibc >= $glibc_floor" "libc.so.6(GLIBC_$glibc_floor)(64bit)" systemd
    grep -q 'systemctl --no-reload preset' <<<"$(rpm -qp --scripts "$rpm_file")" || fail "$rpm_file: no %post preset"
done
[ "$(rpm_field "$agent_rpm" NAME)" = nodecare-agent ] || fail "agent rpm name"
[ "$(rpm_field "$coordinator_rpm" NAME)" = nodecare-coordinator ] || fail "coordinator rpm name"
grep -q '^Summary *: nodecare per-node agent' <<<"$(rpm -qpi "$agent_rpm")" || fail "agent rpm summary"
expect_lines "agent .rpm" "$(rpm -qpl "$agent_rpm")" "${agent_files[@]}" \
    /usr/share/zsh/site-functions/_nodecare-agent /etc/ganeti/node-diagnose-commands \
    /etc/ganeti/node-repair-commands /var/lib/nodecare/agent
expect_lines "coordinator .rpm" "$(rpm -qpl "$coordinator_rpm")" "${coordinator_files[@]}" \
    /usr/share/zsh/site-functions/_nodecare-coordinator /usr/share/zsh/site-functions/_nodecare
expect_lines "agent .rpm config files" "$(rpm -qpc "$agent_rpm")" /etc/nodecare/agent.toml
expect_lines "coordinator .rpm config files" "$(rpm -qpc "$coordinator_rpm")" /etc/nodecare/coordinator.toml
grep -q '^drwxr-xr-x .* root *root .* /etc/ganeti/node-diagnose-commands$' <<<"$(rpm -qplv "$agent_rpm")" ||
    fail "agent rpm: /etc/ganeti/node-diagnose-commands is not root:root 0755"
grep -q '^-rw-r----- .* root *root .* /etc/nodecare/coordinator.toml$' <<<"$(rpm -qplv "$coordinator_rpm")" ||
    fail "coordinator rpm: coordinator.toml is not root:root 0640"
# rpmlint: every error is a defect except these, each deliberate (warnings are printed only).
rpmlint_accepted=(
    # The examples are inactive on purpose: the operator installs one with mode 0755.
    'non-executable-script /usr/share/nodecare/examples/'
    # coordinator.toml names the RAPI credentials; the agent's state is not for other users.
    'non-readable /etc/nodecare/coordinator.toml 640'
    'non-standard-dir-perm /var/lib/nodecare/agent 750'
    # Signing is the distributor's step; Group and %changelog are optional on EL9.
    'no-signature' 'no-packager-tag' 'no-group-tag' 'no-changelogname-tag'
)
lint=$(rpmlint "$agent_rpm" "$coordinator_rpm" 2>&1 || true)
errors=$(grep ': E: ' <<<"$lint" | grep -vF "${rpmlint_accepted[@]/#/-e}" || true)
[ -z "$errors" ] || fail "rpmlint found errors: $errors"
say "rpmlint: no errors beyond the accepted ones ($(grep -c ': W: ' <<<"$lint" || true) warnings)"
say "package contents and metadata OK"

# --- install, run, remove, purge ------------------------------------------------------------
agent_pid=
notify_pid=
created_key=
created_key_dir=
pre_existing_dirs=()
for dir in /etc/ganeti/node-diagnose-commands /etc/ganeti/node-repair-commands; do
    [ -e "$dir" ] && pre_existing_dirs+=("$dir")
done
cleanup() {
    if [ -n "$agent_pid" ]; then kill "$agent_pid" 2>/dev/null || true; fi
    if [ -n "$notify_pid" ]; then kill "$notify_pid" 2>/dev/null || true; fi
    if dpkg-query -W nodecare-agent >/dev/null 2>&1 || dpkg-query -W nodecare-coordinator >/dev/null 2>&1; then
        rm -f /etc/ganeti/node-diagnose-commands/nodecare-test-* 2>/dev/null || true
        dpkg -P nodecare-agent nodecare-coordinator >/dev/null 2>&1 || true
    fi
    if [ -n "$created_key" ]; then rm -f "$created_key"; fi
    if [ -n "$created_key_dir" ]; then rmdir "$created_key_dir" 2>/dev/null || true; fi
}
trap cleanup EXIT

if (exec 3<>"/dev/tcp/127.0.0.1/$agent_port") 2>/dev/null; then
    fail "port $agent_port is in use on this machine; the agent's default port must be free"
fi

dpkg -i "$agent_deb" "$coordinator_deb"
for path in "${agent_files[@]}" "${coordinator_files[@]}"; do
    [ -e "$path" ] || fail "installed package lacks $path"
done
for dir in /etc/ganeti/node-diagnose-commands /etc/ganeti/node-repair-commands; do
    [ "$(stat -c '%U:%G %a' "$dir")" = "root:root 755" ] || fail "$dir is not root:root 0755"
done

nodecare-agent --config /etc/nodecare/agent.toml --check-config >/dev/null 2>&1 ||
    fail "the shipped /etc/nodecare/agent.toml is rejected by nodecare-agent --check-config"

analyze_args=()
command -v man >/dev/null || { analyze_args+=(--man=no); say "no man(1) here: systemd-analyze skips the Documentation= check"; }
systemd-analyze verify "${analyze_args[@]}" /usr/lib/systemd/system/nodecare-agent.service \
    /usr/lib/systemd/system/nodecare-coordinator.service ||
    fail "systemd-analyze verify found problems in the units"
say "systemd-analyze verify OK"

# The agent signs reports with the cluster HMAC key; a CI machine is no Ganeti node.
if [ ! -e /var/lib/ganeti/hmac.key ]; then
    [ -d /var/lib/ganeti ] || { mkdir -p /var/lib/ganeti; created_key_dir=/var/lib/ganeti; }
    head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' >/var/lib/ganeti/hmac.key
    chmod 0400 /var/lib/ganeti/hmac.key
    created_key=/var/lib/ganeti/hmac.key
fi

# Enable one example diagnose script the way the examples README says.
example=$(find /usr/share/nodecare/examples/diagnose -maxdepth 1 -type f | sort | head -n 1)
[ -n "$example" ] || fail "no example diagnose script installed"
enabled=/etc/ganeti/node-diagnose-commands/nodecare-test-$(basename "$example" .sh)
cp "$example" "$enabled"
chown root:root "$enabled"
chmod 0755 "$enabled"
nodecare-agent diagnose --once || fail "nodecare-agent diagnose --once failed"

exec_start=$(sed -n 's/^ExecStart=//p' /usr/lib/systemd/system/nodecare-agent.service)
[ -n "$exec_start" ] || fail "no ExecStart in the installed agent unit"
say "starting the agent as the unit does: $exec_start"
agent_log=$(mktemp)
read -r -a exec_argv <<<"$exec_start"
# Listen on a notification socket as systemd would, to see READY=1 and the watchdog pings.
notify_env=()
if command -v python3 >/dev/null; then
    notify_dir=$(mktemp -d)
    python3 - "$notify_dir/notify.sock" "$notify_dir/messages" <<'EOF' &
import socket, sys
sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
sock.bind(sys.argv[1])
sock.settimeout(30)
with open(sys.argv[2], "a") as messages:
    while True:
        try:
            message = sock.recv(4096).decode()
        except socket.timeout:
            break
        messages.write(message.strip() + "\n")
        messages.flush()
EOF
    notify_pid=$!
    for _ in $(seq 1 50); do [ -S "$notify_dir/notify.sock" ] && break; sleep 0.1; done
    notify_env=(NOTIFY_SOCKET="$notify_dir/notify.sock" WATCHDOG_USEC=1000000)
else
    say "no python3 here: READY=1 and WATCHDOG=1 are not checked"
fi
(cd / && exec env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin "${notify_env[@]}" "${exec_argv[@]}") >"$agent_log" 2>&1 &
agent_pid=$!
report=
# Until the first diagnose run has finished, the report says "not collected yet".
for _ in $(seq 1 100); do
    if report=$(curl -fsS --max-time 5 "http://127.0.0.1:$agent_port/1/report/node/diagnose" 2>/dev/null) &&
        grep -q "nodecare-test-" <<<"$report"; then
        break
    fi
    kill -0 "$agent_pid" 2>/dev/null || { cat "$agent_log" >&2; fail "the agent exited"; }
    sleep 0.2
done
[ -n "$report" ] || { cat "$agent_log" >&2; fail "the agent did not answer on port $agent_port"; }
say "report: $report"
grep -q "nodecare-test-" <<<"$report" || fail "the report does not mention the enabled example script"
if [ -n "$notify_pid" ]; then
    sleep 1.5 # WATCHDOG_USEC=1 s: pings every 0.5 s
    kill "$notify_pid" 2>/dev/null || true
    wait "$notify_pid" 2>/dev/null || true
    notify_pid=
    messages=$(cat "$notify_dir/messages" 2>/dev/null || true)
    rm -rf "$notify_dir"
    grep -qx READY=1 <<<"$messages" || fail "the agent sent no READY=1 (got: $messages)"
    [ "$(grep -cx WATCHDOG=1 <<<"$messages")" -ge 2 ] || fail "the agent sent no watchdog pings (got: $messages)"
    say "sd_notify: READY=1 and $(grep -cx WATCHDOG=1 <<<"$messages") watchdog pings"
fi
kill "$agent_pid"
wait "$agent_pid" 2>/dev/null || true
agent_pid=
rm -f "$agent_log"

rm -f "$enabled"
dpkg -r nodecare-agent nodecare-coordinator
for path in /usr/bin/nodecare-agent /usr/bin/nodecare-coordinator /usr/bin/nodecare \
    /usr/lib/systemd/system/nodecare-agent.service /usr/share/nodecare; do
    [ ! -e "$path" ] || fail "dpkg -r left $path"
done
for path in /etc/nodecare/agent.toml /etc/nodecare/coordinator.toml; do
    [ -e "$path" ] || fail "dpkg -r removed the configuration $path"
done
dpkg -P nodecare-agent nodecare-coordinator
left=()
while read -r path; do
    case "$path" in
        /etc/ganeti | /etc/ganeti/node-*-commands) continue ;; # checked below
    esac
    if [ -e "$path" ] && [ ! -d "$path" ]; then left+=("$path"); fi
    if [ -d "$path" ] && [[ "$path" == *nodecare* ]]; then left+=("$path"); fi
done < <(deb_paths "$agent_deb"; deb_paths "$coordinator_deb")
for path in /etc/nodecare /var/lib/nodecare \
    /etc/systemd/system/multi-user.target.wants/nodecare-agent.service \
    /etc/systemd/system/multi-user.target.wants/nodecare-coordinator.service \
    /var/lib/systemd/deb-systemd-helper-enabled/nodecare-agent.service.dsh-also \
    /var/lib/systemd/deb-systemd-helper-enabled/nodecare-coordinator.service.dsh-also; do
    if [ -e "$path" ]; then left+=("$path"); fi
done
for dir in /etc/ganeti/node-diagnose-commands /etc/ganeti/node-repair-commands; do
    if [ -e "$dir" ] && [[ " ${pre_existing_dirs[*]} " != *" $dir "* ]]; then left+=("$dir"); fi
done
[ ${#left[@]} -eq 0 ] || fail "dpkg -P left: ${left[*]}"
dpkg-query -W nodecare-agent >/dev/null 2>&1 && fail "dpkg still knows nodecare-agent"
say "install, run, remove and purge OK"
