#!/bin/sh
# image.sh — builds psc's container images with podman on a machine that can
# reach no container registry, only its Debian package mirror.
#
# The Dockerfiles (deploy/docker/) start FROM debian:bookworm, as they do with a
# registry. Here that base is made locally: `debootstrap --variant=minbase
# bookworm` from the mirror the machine's apt uses (read from
# /etc/apt/sources.list and /etc/apt/sources.list.d/), with the same mirror and
# its security suite in the base's apt sources, imported with `podman import`
# as docker.io/library/debian:bookworm, the name FROM resolves to. It stays in
# podman's image store: later runs on the machine reuse it (--rebuild-base makes
# it again); a fresh machine builds it. Then `podman build --pull=never`: the
# layer cache keeps the packages layer while deploy/packages.txt and setup.sh do
# not change, and rebuilds psc from the sources.
#
# usage: deploy/image.sh [--base-only] [--rebuild-base] [--cuda] [--tag TAG]
#   (no option)     the base if missing, then deploy/docker/Dockerfile as psc:0.1.0
#   --cuda          also deploy/docker/Dockerfile.cuda-host as psc:0.1.0-cuda: the
#                   equivalent of Dockerfile.cuda (whose NVIDIA repository is out of
#                   reach) with the CUDA runtime and cuBLAS of this machine's toolkit
#                   (PSC_CUDA_HOME, default /usr/local/cuda), which the build mounts
#   --base-only     only the base image
#   --rebuild-base  make the base again even if podman has one
#   --tag TAG       the CPU image's tag (default psc:0.1.0; the CUDA one gets TAG-cuda)
#
# Environment: PSC_CUDA_ARCHS (default "80;90", as Dockerfile.cuda) the GPUs the
# CUDA image's worker is built for; PSC_MIRROR overrides the mirror URI.
# Needs root (rootful podman), podman, runc and debootstrap (deploy/setup.sh
# installs them from deploy/packages-host.txt). Every podman call uses runc
# (crun refuses this sandbox's cgroup setup); setup.sh also sets
# `default_ulimits = []` in /etc/containers/containers.conf (raising
# RLIMIT_NPROC, podman's default, is not permitted there).
# Prints the seconds each stage took ("image: ... in N s") on stderr.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
BASE=docker.io/library/debian:bookworm
tag=psc:0.1.0
base_only=0 rebuild_base=0 cuda=0
while [ $# -gt 0 ]; do
    case $1 in
    --base-only) base_only=1 ;;
    --rebuild-base) rebuild_base=1 ;;
    --cuda) cuda=1 ;;
    --tag)
        [ $# -ge 2 ] || { echo "image: --tag needs a value" >&2; exit 64; }
        tag=$2
        shift
        ;;
    *) echo "image: unknown argument \"$1\" (see the usage in $0)" >&2; exit 64 ;;
    esac
    shift
done
[ "$(id -u)" -eq 0 ] || { echo "image: run as root (rootful podman, debootstrap)" >&2; exit 77; }
PATH=$PATH:/usr/sbin:/sbin # debootstrap, where a root shell without it on PATH has it
for t in podman runc debootstrap; do
    command -v "$t" >/dev/null 2>&1 || { echo "image: $t is missing: run deploy/setup.sh" >&2; exit 69; }
done
pm() { podman --runtime runc "$@"; }

# mirror SUITE: the first URI of the machine's apt sources that serves SUITE
# (one-line "deb URI SUITE ..." files and deb822 .sources files)
mirror() {
    for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
        [ -f "$f" ] || continue
        sed 's/\[[^]]*\]//' "$f" | awk -v s="$1" '$1 == "deb" && $3 == s { print $2; exit }'
    done
    for f in /etc/apt/sources.list.d/*.sources; do
        [ -f "$f" ] || continue
        # stanzas are separated by blank lines; Enabled: no stanzas are skipped
        awk -v s="$1" 'function flush() { if (types ~ /(^| )deb( |$)/ && enabled != "no" && (" " suites " ") ~ (" " s " ")) { split(uris, u, " "); print u[1]; found = 1; exit } types = uris = suites = enabled = "" }
            /^[ \t]*$/ { flush(); next } /^#/ { next }
            tolower($1) == "types:" { $1 = ""; types = $0 } tolower($1) == "uris:" { $1 = ""; uris = $0 }
            tolower($1) == "suites:" { $1 = ""; suites = $0 } tolower($1) == "enabled:" { enabled = tolower($2) }
            END { if (!found) flush() }' "$f" | sed 's/^ *//'
    done
}

make_base() {
    t0=$(date +%s)
    m=${PSC_MIRROR:-$(mirror bookworm | head -1)}
    [ -n "$m" ] || { echo "image: no apt source for bookworm in /etc/apt/sources.list(.d): set PSC_MIRROR" >&2; exit 78; }
    sec=$(mirror bookworm-security | head -1)
    work=$(mktemp -d /var/tmp/psc-base.XXXXXX)
    # debootstrap mounts proc and sys inside the tree while it runs; unmount before removing
    trap 'umount -R "$work/rootfs/proc" "$work/rootfs/sys" 2>/dev/null || :; rm -rf "$work"' EXIT
    echo "image: debootstrap bookworm from $m" >&2
    debootstrap --variant=minbase bookworm "$work/rootfs" "$m" >"$work/debootstrap.log" 2>&1 || {
        tail -20 "$work/debootstrap.log" >&2
        echo "image: debootstrap failed (log above)" >&2
        exit 1
    }
    {
        echo "Types: deb"
        echo "URIs: $m"
        echo "Suites: bookworm bookworm-updates"
        echo "Components: main"
        echo "Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg"
        if [ -n "$sec" ]; then
            echo
            echo "Types: deb"
            echo "URIs: $sec"
            echo "Suites: bookworm-security"
            echo "Components: main"
            echo "Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg"
        fi
    } >"$work/rootfs/etc/apt/sources.list.d/debian.sources"
    rm -f "$work/rootfs/etc/apt/sources.list"
    # what the registry's debian:bookworm (debuerreotype) has too: apt keeps no
    # downloaded .deb or translations in an image's layers, and no service starts
    # while a package installs
    printf '%s\n' 'DPkg::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb /var/cache/apt/*.bin || true"; };' \
        'APT::Update::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb /var/cache/apt/*.bin || true"; };' \
        'Dir::Cache::pkgcache ""; Dir::Cache::srcpkgcache "";' >"$work/rootfs/etc/apt/apt.conf.d/docker-clean"
    echo 'Acquire::Languages "none";' >"$work/rootfs/etc/apt/apt.conf.d/docker-no-languages"
    echo 'Apt::AutoRemove::SuggestsImportant "false";' >"$work/rootfs/etc/apt/apt.conf.d/docker-autoremove-suggests"
    printf '#!/bin/sh\nexit 101\n' >"$work/rootfs/usr/sbin/policy-rc.d"
    chmod 755 "$work/rootfs/usr/sbin/policy-rc.d"
    rm -rf "$work/rootfs/var/cache/apt/archives/"*.deb "$work/rootfs/var/lib/apt/lists/"* "$work/rootfs/var/log/"*.log
    umount -R "$work/rootfs/proc" "$work/rootfs/sys" 2>/dev/null || :
    tar -C "$work/rootfs" --numeric-owner --exclude='./proc/*' --exclude='./sys/*' --exclude='./dev/*' -cf "$work/rootfs.tar" .
    pm image rm -f "$BASE" >/dev/null 2>&1 || :
    # PATH and CMD as in the registry's image (an imported image has no environment,
    # and kube play, unlike podman run, then adds no PATH)
    pm import -q --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' --change 'CMD ["bash"]' --message "debootstrap --variant=minbase bookworm $m" \
        "$work/rootfs.tar" "$BASE" >/dev/null
    rm -rf "$work"
    trap - EXIT
    echo "image: base $BASE made in $(($(date +%s) - t0)) s" >&2
}

if [ "$rebuild_base" = 1 ] || ! pm image exists "$BASE"; then
    make_base
else
    echo "image: base $BASE is there (podman's image store): kept" >&2
fi
[ "$base_only" = 0 ] || exit 0

# build DOCKERFILE TAG [podman build args...]
build() {
    df=$1 t=$2
    shift 2
    t0=$(date +%s)
    echo "image: building $t from $df" >&2
    # --pull=never: FROM is the local base; --network host: apt-get in RUN reaches
    # the mirror as the host does; the build context is the repository root
    # shellcheck disable=SC2068 # the extra args are separate words
    pm build --pull=never --network host --layers -f "$root/$df" --ignorefile "$root/$df.dockerignore" \
        -t "$t" "$@" "$root"
    echo "image: $t built in $(($(date +%s) - t0)) s" >&2
}

# the untagged images a build leaves (the stages' layers once the sources changed): removed
# at the end, all but those that were there before; the packages layer, a parent of the
# tagged image, stays as the cache
dangling() { pm images -q --filter dangling=true | sort -u; }
before=$(dangling)
build deploy/docker/Dockerfile "$tag"
if [ "$cuda" = 1 ]; then
    cuda_home=$(readlink -f "${PSC_CUDA_HOME:-/usr/local/cuda}")
    [ -x "$cuda_home/bin/nvcc" ] || { echo "image: no CUDA toolkit at $cuda_home (PSC_CUDA_HOME)" >&2; exit 69; }
    build deploy/docker/Dockerfile.cuda-host "$tag-cuda" --volume "$cuda_home:/opt/cuda-host:ro" \
        --build-arg "CUDA_ARCHS=${PSC_CUDA_ARCHS:-80;90}"
fi
new=$(dangling | grep -vxF "$before" || true)
# shellcheck disable=SC2086 # one word per image id
[ -z "$new" ] || pm rmi $new >/dev/null 2>&1 || :
