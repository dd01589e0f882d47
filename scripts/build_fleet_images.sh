#!/usr/bin/env bash
# Build the images of the env fleet (docker-compose.yml), offline from the local base image:
#   agentrl/service:latest   the env service + calc plugin (context: a staged copy of the package sources)
#   agentrl/lb:latest        HAProxy (sandboxes/lb)
#   agentrl/postgres:latest  PostgreSQL 15 (sandboxes/postgres)
# Not part of `make setup`: run it before `docker-compose up` (the fleet test runs it too). Like
# build_images.sh, an image is rebuilt only when the hash of its inputs (its files plus the base image id)
# differs from the `agentrl.inputs` label it carries, so a second run takes seconds.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
BASE_IMAGE="agentrl/base:bookworm"
PIP="${AGENTRL_PIP:-.venv/bin/pip}"

docker image inspect "$BASE_IMAGE" >/dev/null 2>&1 \
    || { echo "fleet images: $BASE_IMAGE is missing; run \`make setup\` (or scripts/build_images.sh) first" >&2; exit 1; }

inputs_hash() {  # $1: build context directory
    {
        (cd "$1" && find . -type f -print0 | LC_ALL=C sort -z | xargs -0 sha256sum)
        docker image inspect --format '{{.Id}}' "$BASE_IMAGE"
    } | sha256sum | cut -d' ' -f1
}

image_label() {  # $1: image; prints its agentrl.inputs label, empty when missing
    docker image inspect --format '{{ index .Config.Labels "agentrl.inputs" }}' "$1" 2>/dev/null || true
}

build() {  # $1: image, $2: context, $3: Dockerfile (relative to the context)
    local image="$1" context="$2" dockerfile="$3" hash log
    hash="$(inputs_hash "$context")"
    if [ "$(image_label "$image")" = "$hash" ]; then
        echo "fleet images: $image up to date"
        return
    fi
    echo "fleet images: building $image"
    if ! log="$(docker build --label "agentrl.inputs=$hash" --tag "$image" --file "$context/$dockerfile" "$context" 2>&1)"; then
        echo "$log" >&2
        echo "fleet images: building $image failed (output above)" >&2
        exit 1
    fi
    echo "fleet images: built $image"
}

# Wheels of the service's requirements (and setuptools, the package's build backend), fetched on the host
# with pip because containers here cannot verify PyPI's TLS certificate. Cached per requirements hash.
service_wheels() {  # prints the wheel directory
    local requirements=sandboxes/service/requirements.txt key dir
    key="$(sha256sum "$requirements" | cut -c1-16)"
    dir="${XDG_CACHE_HOME:-$HOME/.cache}/agentrl/fleet-wheels/$key"
    if [ ! -f "$dir/.complete" ]; then
        echo "fleet images: downloading the service's wheels into $dir" >&2
        rm -rf "$dir" && mkdir -p "$dir"
        local platform=(--only-binary=:all: --python-version 3.11 --implementation cp
            --platform manylinux2014_x86_64 --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64)
        "$PIP" download -q --disable-pip-version-check "${platform[@]}" -d "$dir" -r "$requirements" >/dev/null \
            && "$PIP" download -q --disable-pip-version-check "${platform[@]}" --no-deps -d "$dir" \
                "setuptools>=68" >/dev/null \
            || { echo "fleet images: pip download failed; is PyPI reachable from this host?" >&2; exit 1; }
        touch "$dir/.complete"
    fi
    echo "$dir"
}

stage_service_context() {  # $1: empty directory; copies only what the service image needs
    local stage="$1"
    mkdir -p "$stage/envs" "$stage/sandboxes" "$stage/wheels"
    cp "$(service_wheels)"/*.whl "$stage/wheels/"
    cp pyproject.toml README.md "$stage/"
    cp -r agentrl "$stage/agentrl"
    cp -r envs/calc "$stage/envs/calc"
    cp -r sandboxes/service "$stage/sandboxes/service"
    find "$stage" \( -name '__pycache__' -o -name '*.egg-info' -o -name '.pytest_cache' -o -name '.mypy_cache' \) \
        -prune -exec rm -rf {} +
    rm -rf "$stage/envs/calc/tests"
}

STAGE="$(mktemp -d /tmp/agentrl-service-context.XXXXXX)"
trap 'rm -rf "$STAGE"' EXIT
stage_service_context "$STAGE"
build agentrl/service:latest "$STAGE" sandboxes/service/Dockerfile
build agentrl/lb:latest sandboxes/lb Dockerfile
build agentrl/postgres:latest sandboxes/postgres Dockerfile
docker image prune --force --filter "label=agentrl.inputs" >/dev/null
