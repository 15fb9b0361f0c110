#!/bin/sh
# Installs the Debian packages listed in deploy/packages.txt that are missing,
# and unpacks promtool (from Debian's prometheus package) to /opt/psc/promtool.
# Idempotent: does nothing (and needs no network) when all are there.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
SUDO=""
[ "$(id -u)" -ne 0 ] && SUDO=sudo
missing=""
for p in $(grep -v '^#' "$here/packages.txt"); do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
updated=""
if [ -n "$missing" ]; then
    echo "setup: installing$missing" >&2
    $SUDO apt-get update -qq
    updated=1
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends $missing
fi

# promtool lints the /metrics pages in the tests. Only the binary is taken from
# the prometheus package (dpkg-deb -x): the server is never installed or started.
if [ ! -x /opt/psc/promtool ]; then
    echo "setup: unpacking promtool to /opt/psc/promtool" >&2
    tmp=$(mktemp -d)
    trap 'rm -rf "$tmp"' EXIT
    chmod 755 "$tmp" # apt-get download drops to the _apt user where it can
    if ! (cd "$tmp" && apt-get download -qq prometheus >/dev/null 2>&1); then
        [ -n "$updated" ] || $SUDO apt-get update -qq
        (cd "$tmp" && apt-get download -qq prometheus >/dev/null)
    fi
    dpkg-deb -x "$tmp"/prometheus_*.deb "$tmp/x"
    $SUDO mkdir -p /opt/psc
    $SUDO install -m 0755 "$tmp/x/usr/bin/promtool" /opt/psc/promtool
fi
