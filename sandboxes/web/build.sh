#!/usr/bin/env bash
# Build agentrl/sandbox-web:latest (see the Dockerfile beside this script): download the wheels of
# playwright (+ greenlet) and miniwob on the host with pip into a cache keyed by the pins below, stage them
# with the Dockerfile, and `docker build`. Skips when the image's agentrl.inputs label matches.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
BASE_IMAGE="${AGENTRL_BASE_IMAGE:-agentrl/base:bookworm}"
IMAGE="agentrl/sandbox-web:latest"
PINS="playwright==1.65.2 miniwob==1.1.0"
PIP="${PIP:-.venv/bin/pip}"
command -v "$PIP" >/dev/null || PIP=pip3

hash="$({ sha256sum sandboxes/web/Dockerfile sandboxes/web/build.sh; echo "$PINS";
    docker image inspect --format '{{.Id}}' "$BASE_IMAGE"; } | sha256sum | cut -d' ' -f1)"
current="$(docker image inspect --format '{{ index .Config.Labels "agentrl.inputs" }}' "$IMAGE" 2>/dev/null || true)"
if [ "$current" = "$hash" ]; then
    echo "images: $IMAGE up to date"
    exit 0
fi

wheels="${XDG_CACHE_HOME:-$HOME/.cache}/agentrl/web-wheels/$(echo "$PINS" | sha256sum | cut -c1-12)"
if [ ! -f "$wheels/.complete" ]; then
    echo "images: downloading the web sandbox's wheels into $wheels" >&2
    mkdir -p "$wheels"
    # shellcheck disable=SC2086
    "$PIP" download -q -d "$wheels" --only-binary=:all: --python-version 3.11 --implementation cp \
        --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux1_x86_64 \
        playwright==1.65.2
    "$PIP" download -q -d "$wheels" --no-deps miniwob==1.1.0
    touch "$wheels/.complete"
fi

stage="$(mktemp -d)"
trap 'rm -rf "$stage"' EXIT
cp sandboxes/web/Dockerfile "$stage/"
mkdir "$stage/wheels"
cp "$wheels"/*.whl "$stage/wheels/"
echo "images: building $IMAGE"
if ! log="$(docker build --build-arg "BASE_IMAGE=$BASE_IMAGE" --label "agentrl.inputs=$hash" \
    --tag "$IMAGE" "$stage" 2>&1)"; then
    echo "$log" >&2
    echo "images: building $IMAGE failed (output above)" >&2
    exit 1
fi
echo "images: built $IMAGE"
