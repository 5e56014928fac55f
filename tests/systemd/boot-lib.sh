# Boots a Debian 12 (or 13: NODECARE_SYSTEMD_SUITE=trixie) root with systemd as PID 1 in its own PID and mount namespaces, for
# scripts/test.d/systemd-boot.sh. Source it; needs root, debootstrap, unshare, nsenter.
#
# The root is made once with debootstrap and cached under $NODECARE_SYSTEMD_CACHE (default
# /var/cache/nodecare-systemd-test), keyed on the suite and the package list. Every boot runs on
# an overlay of the cached root (changes go to a fresh upper directory), so a run never changes
# the cache. systemd-nspawn is not used: it needs a host system bus, which these machines lack;
# systemd (252 in Debian 12, 257 in 13) boots as PID 1 under `unshare --pid --fork --mount` with
# journald, dbus and logind.

boot_suite=${NODECARE_SYSTEMD_SUITE:-bookworm}
case $boot_suite in
    bookworm) boot_release="Debian 12" ;;
    trixie) boot_release="Debian 13" ;;
    *) boot_release="Debian $boot_suite" ;;
esac
boot_mirror=${NODECARE_SYSTEMD_MIRROR:-http://deb.debian.org/debian}
# What the test needs in the node: systemd and dbus (the init), python3 (example scripts and
# hooks), curl (the agent's HTTP API), procps (pgrep).
boot_packages=systemd,systemd-sysv,dbus,python3,curl,ca-certificates,procps
boot_cache=${NODECARE_SYSTEMD_CACHE:-/var/cache/nodecare-systemd-test}
boot_pid=      # PID (in the host's namespace) of the root's systemd
boot_runner=   # PID of unshare
boot_work=     # overlay upper/work directories of this run
boot_root=     # the running root seen from the host: /proc/<systemd pid>/root

# The cached root for this suite and package list, made when missing. Prints its path.
boot_cached_root() {
    local key dir tmp
    key=$(printf '%s %s %s\n' "$boot_suite" "$boot_packages" "$(dpkg --print-architecture)" |
        sha256sum | cut -c1-16)
    dir=$boot_cache/$boot_suite-$key
    if [ ! -e "$dir/.complete" ]; then
        mkdir -p "$boot_cache"
        tmp=$(mktemp -d "$boot_cache/.make.XXXXXX")
        echo "systemd-boot: debootstrap $boot_suite ($boot_packages) into $dir" >&2
        if ! debootstrap --variant=minbase --include="$boot_packages" "$boot_suite" "$tmp" \
            "$boot_mirror" >"$tmp.log" 2>&1; then
            tail -n 20 "$tmp.log" >&2
            rm -rf "$tmp" "$tmp.log"
            return 1
        fi
        rm -f "$tmp.log"
        # The node's apt sources are set by the test (a file repository); no network access.
        rm -f "$tmp"/etc/apt/sources.list "$tmp"/etc/apt/sources.list.d/*
        rm -f "$tmp"/var/cache/apt/archives/*.deb
        touch "$tmp/.complete"
        rm -rf "$dir"
        mv "$tmp" "$dir"
    fi
    echo "$dir"
}

# boot_start LOWER: boots LOWER (read-only) with an overlay; returns once systemd answers.
# Files put under "$boot_work/upper" before the call are in the booted root.
boot_start() {
    local lower=$1
    [ -n "$boot_work" ] || boot_work=$(mktemp -d /tmp/nodecare-systemd.XXXXXX)
    mkdir -p "$boot_work/upper" "$boot_work/work" "$boot_work/merged"
    # The node's machine id: one per boot directory, as on a real node.
    [ -s "$boot_work/upper/etc/machine-id" ] || {
        mkdir -p "$boot_work/upper/etc"
        head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$boot_work/upper/etc/machine-id"
        echo >>"$boot_work/upper/etc/machine-id"
    }
    # shellcheck disable=SC2016
    setsid unshare --pid --fork --kill-child --mount --propagation private bash -c '
        set -e
        w=$1 lower=$2
        mount -t overlay overlay -o "lowerdir=$lower,upperdir=$w/upper,workdir=$w/work" "$w/merged"
        r=$w/merged
        mount --rbind /dev "$r/dev"
        mount -t proc proc "$r/proc"
        mount --rbind /sys "$r/sys"
        exec env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin container=nodecare-test TERM=dumb \
            /usr/sbin/chroot "$r" /lib/systemd/systemd
    ' boot "$boot_work" "$lower" >"$boot_work/console.log" 2>&1 </dev/null &
    boot_runner=$!
    local _
    for _ in $(seq 1 100); do
        boot_pid=$(pgrep -P "$boot_runner" -x systemd | head -n 1 || true)
        [ -n "$boot_pid" ] && break
        sleep 0.2
    done
    [ -n "$boot_pid" ] || { cat "$boot_work/console.log" >&2; echo "systemd-boot: systemd did not start" >&2; return 1; }
    boot_root=/proc/$boot_pid/root
    local state=
    for _ in $(seq 1 150); do
        state=$(in_root systemctl is-system-running 2>/dev/null || true)
        case "$state" in running | degraded) break ;; esac
        sleep 0.2
    done
    case "$state" in
        running | degraded) ;;
        *) echo "systemd-boot: the system did not come up (state: ${state:-none})" >&2; return 1 ;;
    esac
}

# Runs a command in the booted root (its mount and PID namespaces, its root directory), with a
# clean environment as an operator's shell would have.
in_root() {
    timeout "${IN_ROOT_TIMEOUT:-300}" nsenter -t "$boot_pid" -m -p -r -w \
        env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8 HOME=/root SYSTEMD_PAGER= "$@"
}

# Stops the booted root (kills its PID namespace) and removes the overlay's upper directory.
boot_stop() {
    if [ -n "$boot_pid" ] && kill -0 "$boot_pid" 2>/dev/null; then
        kill -KILL "$boot_pid" 2>/dev/null || true
    fi
    if [ -n "$boot_runner" ]; then
        kill "$boot_runner" 2>/dev/null || true
        wait "$boot_runner" 2>/dev/null || true
    fi
    boot_pid= boot_runner= boot_root=
    if [ -n "$boot_work" ]; then rm -rf "$boot_work"; fi
    boot_work=
}
