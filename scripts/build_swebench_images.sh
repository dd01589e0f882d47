#!/usr/bin/env bash
# Build the environment images of the local SWE-bench set: for every sandboxes/swebench/sdists/NAME-VERSION.tar.gz
# an image agentrl/swebench-NAME:VERSION FROM agentrl/sandbox-python:latest, with pytest (wheels downloaded
# here on the host, cached per requirements hash) and the project's tree read-only in /opt/swebench/pristine.
# Not part of `make setup`: the swebench tests and `agentrl swebench validate` callers run it. Like
# build_images.sh, an image is rebuilt only when the hash of its inputs (Dockerfile, requirements, sdist, the
# base image id) differs from its `agentrl.inputs` label, so a second run takes seconds.
#
# Usage: scripts/build_swebench_images.sh [NAME ...]   (default: every sdist)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
BASE_IMAGE="${AGENTRL_SWEBENCH_BASE:-agentrl/sandbox-python:latest}"
PIP="${AGENTRL_PIP:-.venv/bin/pip}"
SRC=sandboxes/swebench

docker image inspect "$BASE_IMAGE" >/dev/null 2>&1 \
    || { echo "swebench images: $BASE_IMAGE is missing; run \`make setup\` (or scripts/build_images.sh) first" >&2; exit 1; }

image_label() {  # $1: image; prints its agentrl.inputs label, empty when missing
    docker image inspect --format '{{ index .Config.Labels "agentrl.inputs" }}' "$1" 2>/dev/null || true
}

wheels() {  # prints the directory holding the test runner's wheels
    local key dir
    key="$(sha256sum "$SRC/requirements.txt" | cut -c1-16)"
    dir="${XDG_CACHE_HOME:-$HOME/.cache}/agentrl/swebench-wheels/$key"
    if [ ! -f "$dir/.complete" ]; then
        echo "swebench images: downloading the test runner's wheels into $dir" >&2
        rm -rf "$dir" && mkdir -p "$dir"
        "$PIP" download -q --disable-pip-version-check --only-binary=:all: --python-version 3.11 \
            --implementation py --platform any -d "$dir" -r "$SRC/requirements.txt" >/dev/null \
            || { echo "swebench images: pip download failed; is PyPI reachable from this host?" >&2; exit 1; }
        touch "$dir/.complete"
    fi
    echo "$dir"
}

build_one() {  # $1: path of an sdist NAME-VERSION.tar.gz
    local sdist="$1" base name version image stage hash log
    base="$(basename "$sdist" .tar.gz)"
    name="${base%-*}" version="${base##*-}"
    image="agentrl/swebench-$name:$version"
    stage="$(mktemp -d /tmp/agentrl-swebench-context.XXXXXX)"
    mkdir -p "$stage/wheels"
    cp "$WHEELS"/*.whl "$stage/wheels/"
    cp "$SRC/project.Dockerfile" "$SRC/requirements.txt" "$stage/"
    cp "$sdist" "$stage/"
    hash="$({ (cd "$stage" && find . -type f -print0 | LC_ALL=C sort -z | xargs -0 sha256sum)
              docker image inspect --format '{{.Id}}' "$BASE_IMAGE"; } | sha256sum | cut -d' ' -f1)"
    if [ "$(image_label "$image")" = "$hash" ]; then
        echo "swebench images: $image up to date"
        rm -rf "$stage"
        return
    fi
    echo "swebench images: building $image"
    if ! log="$(docker build --build-arg "BASE_IMAGE=$BASE_IMAGE" --build-arg "SDIST=$(basename "$sdist")" \
        --label "agentrl.inputs=$hash" --label "agentrl.swebench.project=$name" \
        --tag "$image" --file "$stage/project.Dockerfile" "$stage" 2>&1)"; then
        echo "$log" >&2
        rm -rf "$stage"
        echo "swebench images: building $image failed (output above)" >&2
        exit 1
    fi
    rm -rf "$stage"
    echo "swebench images: built $image"
}

WHEELS="$(wheels)"
if [ "$#" -eq 0 ]; then
    for sdist in "$SRC"/sdists/*.tar.gz; do build_one "$sdist"; done
else
    for name in "$@"; do
        matches=("$SRC"/sdists/"$name"-*.tar.gz)
        [ -e "${matches[0]}" ] || { echo "swebench images: no sdist for $name in $SRC/sdists" >&2; exit 1; }
        build_one "${matches[0]}"
    done
fi
docker image prune --force --filter "label=agentrl.swebench.project" >/dev/null
