#!/usr/bin/env bash
# Build agentrl/base:bookworm, the root of every sandbox image, offline from Debian packages:
# debootstrap (minbase + python3, git, patch, coreutils) into a temp dir, then `docker import`.
# Skips when the image exists and its `agentrl.inputs` label equals the hash of this script.
# Users with a registry may instead `docker tag debian:bookworm-slim`-based images as agentrl/base:bookworm;
# the sandbox Dockerfiles only assume Debian bookworm with python3 and coreutils.
set -euo pipefail
IMAGE="${AGENTRL_BASE_IMAGE:-agentrl/base:bookworm}"
MIRROR="${DEBIAN_MIRROR:-http://deb.debian.org/debian}"
PACKAGES="python3,git,patch,coreutils"
HASH="$(sha256sum "${BASH_SOURCE[0]}" | cut -d' ' -f1)"

current="$(docker image inspect --format '{{ index .Config.Labels "agentrl.inputs" }}' "$IMAGE" 2>/dev/null || true)"
if [ "$current" = "$HASH" ]; then
    echo "images: $IMAGE up to date"
    exit 0
fi
if ! command -v debootstrap >/dev/null; then
    echo "images: debootstrap is missing; run \`make setup\` as root (or apt-get install debootstrap)" >&2
    exit 1
fi
if [ "$(id -u)" -ne 0 ]; then
    echo "images: building $IMAGE needs root (debootstrap); run \`sudo make setup\`" >&2
    exit 1
fi

ROOTFS="$(mktemp -d /var/tmp/agentrl-base.XXXXXX)"
trap 'rm -rf --one-file-system "$ROOTFS"' EXIT
echo "images: building $IMAGE with debootstrap (about a minute)"
debootstrap --variant=minbase --include="$PACKAGES" bookworm "$ROOTFS" "$MIRROR" >"$ROOTFS.log" 2>&1 \
    || { echo "images: debootstrap failed; see $ROOTFS.log" >&2; exit 1; }
rm -f "$ROOTFS.log"
rm -rf "$ROOTFS"/var/cache/apt/archives/*.deb "$ROOTFS"/var/lib/apt/lists/*
old="$(docker image inspect --format '{{.Id}}' "$IMAGE" 2>/dev/null || true)"
tar -C "$ROOTFS" --numeric-owner -c . \
    | docker import --change "LABEL agentrl.inputs=$HASH" --change 'CMD ["/bin/bash"]' - "$IMAGE" >/dev/null
# the replaced image is now untagged; drop it unless a container or child image still uses it
[ -n "$old" ] && docker image rm "$old" >/dev/null 2>&1 || true
echo "images: built $IMAGE"
