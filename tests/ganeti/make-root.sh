#!/usr/bin/env bash
# Make (once) and print the path of a Debian root holding another release's Ganeti, for
# `cluster-up.sh` with NODECARE_GNT_VERSION=3.1 (or NODECARE_GNT_ROOT=<this path>).
#
#   tests/ganeti/make-root.sh [SUITE]        (default: trixie, Debian 13, Ganeti 3.1)
#
# The root is made with `debootstrap --variant=minbase`, then Ganeti and what the namespace
# cluster needs are installed in it with `apt-get install --no-install-recommends` (a
# policy-rc.d keeps every daemon from starting). It is cached under $NODECARE_GNT_ROOT_CACHE
# (default /var/cache/nodecare-ganeti-root), keyed on the suite, the package list and the
# architecture; a second call returns at once. Nodes never write to it: each node mounts it as
# the lower layer of an overlay of its own (see cluster-up.sh). Needs root, debootstrap and the
# Debian mirror ($NODECARE_GNT_MIRROR, default the one the boot test uses).
set -euo pipefail

SUITE=${1:-trixie}
MIRROR=${NODECARE_GNT_MIRROR:-${NODECARE_SYSTEMD_MIRROR:-http://deb.debian.org/debian}}
CACHE=${NODECARE_GNT_ROOT_CACHE:-/var/cache/nodecare-ganeti-root}

case $SUITE in
  trixie) GNT_PACKAGES=(ganeti ganeti-3.1 ganeti-haskell-3.1 ganeti-htools-3.1) ;;
  bookworm) GNT_PACKAGES=(ganeti ganeti-3.0 ganeti-haskell-3.0 ganeti-htools-3.0) ;;
  *) echo "make-root: unknown suite '$SUITE' (trixie or bookworm)" >&2; exit 2 ;;
esac
# The same tools install-packages.sh puts on the machine itself, plus python3 and procps,
# which a minbase root lacks and the scenarios' node-side commands use.
PACKAGES=("${GNT_PACKAGES[@]}" ganeti-testsuite python3-ganeti-rapi ganeti-os-noop
  openssh-server openssh-client iproute2 util-linux curl socat openssl procps python3
  libfaketime faketime)

die() { echo "make-root: $*" >&2; exit 1; }
[[ $(id -u) -eq 0 ]] || die "must run as root"
command -v debootstrap >/dev/null || die "debootstrap not found (apt-get install debootstrap)"

key=$(printf '%s %s %s\n' "$SUITE" "${PACKAGES[*]}" "$(dpkg --print-architecture)" | sha256sum | cut -c1-16)
dir=$CACHE/$SUITE-ganeti-$key
if [[ -e $dir/.complete ]]; then
  echo "$dir"
  exit 0
fi

mkdir -p "$CACHE"
# One builder at a time per cache (two test runs starting together build it once).
exec 9>"$CACHE/.lock"
flock 9
if [[ -e $dir/.complete ]]; then
  echo "$dir"
  exit 0
fi

t0=$(date +%s)
tmp=$(mktemp -d "$CACHE/.make.XXXXXX")
trap 'rm -rf "$tmp" "$tmp.log"' EXIT
echo "make-root: debootstrap $SUITE into $dir (about 3-4 min, 800 MB)" >&2
debootstrap --variant=minbase "$SUITE" "$tmp" "$MIRROR" >"$tmp.log" 2>&1 ||
  { tail -n 20 "$tmp.log" >&2; die "debootstrap failed"; }
printf '#!/bin/sh\nexit 101\n' >"$tmp/usr/sbin/policy-rc.d"
chmod 755 "$tmp/usr/sbin/policy-rc.d"
cp /etc/resolv.conf "$tmp/etc/resolv.conf"
# apt inside the root, with /proc and /dev mounted in a mount namespace of its own only.
# shellcheck disable=SC2016
unshare --mount --propagation private sh -c '
  set -e
  r=$1; shift
  mount -t proc proc "$r/proc"
  mount --rbind /dev "$r/dev"
  export DEBIAN_FRONTEND=noninteractive
  chroot "$r" apt-get update
  chroot "$r" apt-get install -y --no-install-recommends "$@"
' make-root "$tmp" "${PACKAGES[@]}" >>"$tmp.log" 2>&1 ||
  { tail -n 20 "$tmp.log" >&2; die "apt-get install in the root failed"; }
for p in "${PACKAGES[@]}"; do
  [[ $(chroot "$tmp" dpkg-query -W -f='${db:Status-Status}' "$p" 2>/dev/null) == installed ]] ||
    die "package $p is not installed in the root"
done
# The daemons of a node are started by cluster-up.sh, never by a package script.
rm -f "$tmp/usr/sbin/policy-rc.d"
rm -f "$tmp"/var/cache/apt/archives/*.deb "$tmp"/var/lib/apt/lists/*_Packages
: >"$tmp/etc/resolv.conf"
# Mount points of what every node shares with the machine (see cluster-up.sh).
mkdir -p "$tmp/work"
chroot "$tmp" dpkg-query -W -f='${Package} ${Version}\n' 'ganeti*' >"$tmp/.ganeti-packages"
touch "$tmp/.complete"
rm -rf "$dir"
mv "$tmp" "$dir"
trap - EXIT
rm -f "$tmp.log"
echo "make-root: $SUITE root made in $(($(date +%s) - t0)) s ($(du -sh "$dir" | cut -f1))" >&2
echo "$dir"
