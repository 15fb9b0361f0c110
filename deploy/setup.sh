#!/bin/sh
# Installs the Debian packages listed in deploy/packages.txt (and, on a host,
# deploy/packages-host.txt) that are missing, sets podman up for the image test
# (deploy/image.sh, tests/integration/test_image.sh; the last part),
# unpacks promtool (from Debian's prometheus package) to /opt/psc/promtool, and
# installs the Kubernetes manifest validator's npm packages (see the end).
# Idempotent: does nothing (and needs no network) when all are there.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
SUDO=""
[ "$(id -u)" -ne 0 ] && SUDO=sudo
# PSC_SETUP_HOST=0 (the Dockerfiles): only packages.txt, not the host-only test
# packages of packages-host.txt (podman, runc, debootstrap, catatonit: the image test).
lists="$here/packages.txt"
if [ "${PSC_SETUP_HOST:-1}" != 0 ]; then
    [ -f "$here/packages-host.txt" ] || { echo "setup: no $here/packages-host.txt (in an image: PSC_SETUP_HOST=0)" >&2; exit 1; }
    lists="$lists $here/packages-host.txt"
fi
missing=""
# shellcheck disable=SC2013,SC2086 # a package per line; one word per list
for p in $(cat $lists | grep -v '^#'); do
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

# The Kubernetes manifests (deploy/k8s/) are validated offline by the tests
# (tests/k8s/k8s.js) against the schemas of the npm package kubernetes-models,
# read with the npm package yaml: both go to /opt/psc/k8s-validate. Node.js and
# npm come from Debian where the machine has none (not in packages.txt: a
# machine with another Node.js build, which brings its own npm, keeps it).
# PSC_SETUP_K8S=0 skips this (the container image does not need it).
K8S_NPM="kubernetes-models@4.5.1 yaml@2.9.1"
if [ "${PSC_SETUP_K8S:-1}" != 0 ] && [ "$(cat /opt/psc/k8s-validate/.installed 2>/dev/null)" != "$K8S_NPM" ]; then
    if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
        echo "setup: installing nodejs npm" >&2
        [ -n "$updated" ] || $SUDO apt-get update -qq
        DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends nodejs npm
    fi
    echo "setup: installing $K8S_NPM to /opt/psc/k8s-validate" >&2
    $SUDO mkdir -p /opt/psc/k8s-validate
    # shellcheck disable=SC2086 # one word per package
    $SUDO npm install --prefix /opt/psc/k8s-validate --no-save --no-audit --no-fund --loglevel=error $K8S_NPM
    echo "$K8S_NPM" | $SUDO tee /opt/psc/k8s-validate/.installed >/dev/null
fi

# podman (packages-host.txt) runs the image test's containers. Raising
# RLIMIT_NPROC, which podman does for every container by default, is not
# permitted on the CI and development VMs: no default ulimits. Only where podman
# is installed and containers.conf does not set them already.
if [ "${PSC_SETUP_HOST:-1}" != 0 ] && command -v podman >/dev/null 2>&1 &&
    ! grep -qs '^[[:space:]]*default_ulimits' /etc/containers/containers.conf; then
    echo "setup: default_ulimits = [] in /etc/containers/containers.conf" >&2
    $SUDO mkdir -p /etc/containers
    if grep -qs '^\[containers\]' /etc/containers/containers.conf; then
        $SUDO sed -i 's/^\[containers\]/&\ndefault_ulimits = []/' /etc/containers/containers.conf
    else
        printf '[containers]\ndefault_ulimits = []\n' | $SUDO tee -a /etc/containers/containers.conf >/dev/null
    fi
fi
