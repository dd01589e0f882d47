#!/usr/bin/env bash
# Make sure a Docker engine answers and the tools to build the base image exist. Idempotent: when
# `docker info` works and nothing is missing it does nothing. Otherwise (root on Debian only) it installs
# docker.io and debootstrap, starts dockerd in the background (log: /var/log/agentrl/dockerd.log), and
# waits up to 60 s for it to answer. It also installs Debian's docker-compose when neither it nor the
# `docker compose` plugin exists (needed only for the env fleet, docker-compose.yml: without root it warns
# instead of failing).
set -euo pipefail
BASE_IMAGE="agentrl/base:bookworm"
LOG_DIR="/var/log/agentrl"
WAIT_S="${AGENTRL_DOCKER_WAIT_S:-60}"

die() { echo "docker: $*" >&2; exit 1; }

engine_ready() { docker info >/dev/null 2>&1; }

# debootstrap is needed only to build the base image, i.e. when that image is not there yet
needs_debootstrap() {
    ! command -v debootstrap >/dev/null && ! docker image inspect "$BASE_IMAGE" >/dev/null 2>&1
}

require_root_debian() {
    [ "$(id -u)" -eq 0 ] || die "$1 and this is not root; rerun as root (\`sudo make setup\`) or install it yourself"
    [ -f /etc/debian_version ] || die "$1 and this is not Debian; install Docker for your OS and rerun \`make setup\`"
}

apt_install() {  # refresh the package lists only when a plain install fails
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q "$@" >/dev/null \
        || { apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -q "$@" >/dev/null; } \
        || die "apt-get install $* failed"
}

start_dockerd() {
    mkdir -p "$LOG_DIR"
    echo "docker: starting dockerd (log: $LOG_DIR/dockerd.log)"
    # setsid + nohup: the engine outlives this script and the make process that ran it
    setsid nohup dockerd >>"$LOG_DIR/dockerd.log" 2>&1 </dev/null &
    for _ in $(seq "$WAIT_S"); do
        engine_ready && return 0
        sleep 1
    done
    die "dockerd did not answer within ${WAIT_S}s; see $LOG_DIR/dockerd.log"
}

needs_compose() {
    ! command -v docker-compose >/dev/null && ! docker compose version >/dev/null 2>&1
}

install_compose() {
    if [ "$(id -u)" -ne 0 ] || [ ! -f /etc/debian_version ]; then
        echo "docker: warning: docker-compose is missing (needed only for the env fleet); install it," \
            "e.g. \`sudo apt-get install docker-compose\`" >&2
        return 0
    fi
    echo "docker: installing docker-compose"
    apt_install docker-compose
}

if engine_ready && ! needs_debootstrap && ! needs_compose; then
    echo "docker: engine ready"
    exit 0
fi
if ! engine_ready; then
    require_root_debian "no Docker engine answers \`docker info\`"
    missing=()
    command -v dockerd >/dev/null || missing+=(docker.io)
    command -v debootstrap >/dev/null || missing+=(debootstrap)
    [ "${#missing[@]}" -eq 0 ] || { echo "docker: installing ${missing[*]}"; apt_install "${missing[@]}"; }
    # a dockerd may be running but still starting up (or wedged): never start a second one
    if pgrep -x dockerd >/dev/null; then
        echo "docker: dockerd is running but not answering yet; waiting"
        for _ in $(seq "$WAIT_S"); do engine_ready && break; sleep 1; done
        engine_ready || die "dockerd runs but does not answer \`docker info\`; check it (ls -l /var/run/docker.sock)"
    else
        start_dockerd
    fi
fi
if needs_debootstrap; then
    require_root_debian "debootstrap is needed to build $BASE_IMAGE"
    echo "docker: installing debootstrap"
    apt_install debootstrap
fi
if needs_compose; then
    install_compose
fi
echo "docker: engine ready"
