#!/usr/bin/env bash
# A local stand-in for python:3.11-slim where no registry can be pulled from: Debian bookworm (Python
# 3.11, with venv, headers and `python`) bootstrapped from Debian's package archive and imported as
# an image. Needs root, debootstrap and a reachable daemon.
#
#   images/debian-base.sh [TAG]      (default puffer-bench-base:bookworm)
#
# Environment: DOCKER (docker executable), MIRROR (Debian mirror, default http://deb.debian.org/debian).
set -euo pipefail

TAG=${1:-puffer-bench-base:bookworm}
DOCKER=${DOCKER:-docker}
MIRROR=${MIRROR:-http://deb.debian.org/debian}

die() {
    echo "debian-base.sh: error: $*" >&2
    exit 1
}

[ "$(id -u)" = 0 ] || die "debootstrap needs root"
command -v debootstrap >/dev/null 2>&1 || die "debootstrap is not installed (apt-get install debootstrap)"

ROOTFS=$(mktemp -d "${TMPDIR:-/var/tmp}/puffer-rootfs.XXXXXX")
trap 'rm -rf "$ROOTFS"' EXIT
echo "debian-base.sh: bootstrapping Debian bookworm from $MIRROR (about a minute or more)" >&2
debootstrap --variant=minbase --include=python3,python3-venv,python3-dev,python-is-python3 \
    bookworm "$ROOTFS" "$MIRROR" >"$ROOTFS.log" 2>&1 || {
    tail -n 5 "$ROOTFS.log" >&2
    rm -f "$ROOTFS.log"
    die "debootstrap failed (last lines above)"
}
rm -f "$ROOTFS.log"
rm -rf "$ROOTFS"/var/cache/apt/archives/*.deb "$ROOTFS"/var/lib/apt/lists/*
tar -C "$ROOTFS" --numeric-owner -c . |
    "$DOCKER" import --change 'CMD ["python3"]' --change 'ENV LANG=C.UTF-8' - "$TAG" >/dev/null
echo "debian-base.sh: built $TAG" >&2
