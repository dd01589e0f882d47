#!/usr/bin/env bash
# The kill-restart-down sequence of issue 39 on the compose fleet, counting the sandboxes it leaks:
#   IMAGE=agentrl/service:latest bash scripts/fleet_leak_check.sh
# Brings up sandboxes/service/docker-compose.host.yml with IMAGE as the replicas' image (default: the
# current one, scripts/build_fleet_images.sh), fills both replicas' warm pools (8 calc sandboxes each, plus
# the one a python call holds), SIGKILLs env-1 (`docker kill`), starts the same container again, waits until
# it answers, runs `docker-compose down`, and prints how many sandbox containers of this run are left
# (labelled agentrl.leakcheck=<project>; removed afterwards). Prints one line: `leaked N of M`.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
IMAGE="${IMAGE:-agentrl/service:latest}"
PYTHON="${PYTHON:-.venv/bin/python}"
PROJECT="agentrl-leakcheck-$$"
FILE="$(mktemp /tmp/agentrl-leakcheck.XXXXXX.yml)"
COMPOSE=(docker-compose -p "$PROJECT" -f "$FILE")
sed "s#image: agentrl/service:latest#image: $IMAGE#" sandboxes/service/docker-compose.host.yml >"$FILE"

port() { "$PYTHON" -c 'from agentrl.service.embedded import free_loopback_port; print(free_loopback_port())'; }
export AGENTRL_ENV_1_PORT="$(port)" AGENTRL_ENV_2_PORT="$(port)" AGENTRL_LB_PORT="$(port)" AGENTRL_PG_PORT="$(port)"
export POSTGRES_PASSWORD="leakcheck" AGENTRL_SERVICE_TOKEN=""
export AGENTRL_SERVICE_ARGS="--env-kwargs {\"agentrl/Calc-v0\":{\"sandbox_labels\":{\"agentrl.leakcheck\":\"$PROJECT\"}}}"
sandboxes() { docker ps -aq --filter "label=agentrl.leakcheck=$PROJECT" | wc -l; }
answers() { curl -sf "http://127.0.0.1:$1/healthz" >/dev/null; }
wait_until() { for _ in $(seq 1 240); do if "$@"; then return 0; fi; sleep 0.5; done; echo "timed out: $*" >&2; return 1; }
cleanup() {
    "${COMPOSE[@]}" down -v --remove-orphans >/dev/null 2>&1 || true
    docker ps -aq --filter "label=agentrl.leakcheck=$PROJECT" | xargs -r docker rm -f >/dev/null
    rm -f "$FILE"
}
trap cleanup EXIT

"${COMPOSE[@]}" up -d env-1 env-2 >/dev/null 2>&1
wait_until answers "$AGENTRL_ENV_1_PORT" && wait_until answers "$AGENTRL_ENV_2_PORT"
for replica_port in "$AGENTRL_ENV_1_PORT" "$AGENTRL_ENV_2_PORT"; do  # one python call starts the warm pool
    "$PYTHON" - "$replica_port" <<'EOF'
import asyncio, sys
from agentrl.client import EnvClient
from agentrl.types import Action, ToolCall

async def main() -> None:
    async with EnvClient(f"http://127.0.0.1:{sys.argv[1]}") as client:
        start = await client.create_session("agentrl/Calc-v0", {"id": "t", "question": "1 + 1?", "answer": "2"}, 0)
        await client.step(start.session_id, Action("", (ToolCall("python", {"code": "print(2)"}),)))

asyncio.run(main())
EOF
done
full() { [ "$(sandboxes)" -ge 18 ]; }
wait_until full
before="$(sandboxes)"
env1="$("${COMPOSE[@]}" ps -q env-1)"
docker kill "$env1" >/dev/null
docker start "$env1" >/dev/null
wait_until answers "$AGENTRL_ENV_1_PORT"
"${COMPOSE[@]}" down -v --remove-orphans >/dev/null 2>&1
echo "leaked $(sandboxes) of $before sandboxes after kill, start, down (image $IMAGE)"
