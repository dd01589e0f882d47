"""The fleet's load balancer routes forks: the `agentrl/lb` image (HAProxy, with this checkout's config) on
host networking in front of two env-service replicas served in this process on loopback ports. Sessions
created through it land on both replicas; each fork (whose id is `<root>.<uuid>`) is then stepped through
the balancer and must reach its parent's replica; a tree's route outlives the DELETE of its root and is
forgotten with its last session.

Needs the `agentrl/lb` image (scripts/build_fleet_images.sh); skipped without it.
"""

from __future__ import annotations

import asyncio
import subprocess
import time
import uuid
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

import httpx
import pytest
from fixtures_envs import GUESS_NUMBER_ID
from service_harness import serving

from agentrl.client import ClientConfig, EnvClient
from agentrl.errors import SessionNotFound
from agentrl.service import ServiceSettings
from agentrl.service.embedded import free_loopback_port
from agentrl.types import Action, ToolCall

pytestmark = pytest.mark.docker

LB_DIR = Path(__file__).resolve().parents[2] / "sandboxes" / "lb"
IMAGE = "agentrl/lb:latest"


def _guess(number: int) -> Action:
    return Action(text="", tool_calls=(ToolCall(name="guess", arguments={"number": number}),))


@contextmanager
def balancer(replicas: dict[str, str]) -> Iterator[str]:
    if subprocess.run(["docker", "image", "inspect", IMAGE], capture_output=True).returncode:
        pytest.skip(f"{IMAGE} is missing; run scripts/build_fleet_images.sh")
    port, name = free_loopback_port(), f"agentrl-lb-fork-test-{uuid.uuid4().hex[:8]}"
    servers = " ".join(f"{key}={url.removeprefix('http://')}" for key, url in replicas.items())
    mounts = [f"{LB_DIR / f}:/etc/agentrl-lb/{f}:ro" for f in ("haproxy.cfg.in", "render-config.sh")]
    command = ["docker", "run", "-d", "--rm", "--name", name, "--network", "host"]
    command += [arg for mount in mounts for arg in ("-v", mount)]
    command += ["-e", f"AGENTRL_LB_BIND=127.0.0.1:{port}", "-e", f"AGENTRL_LB_REPLICAS={servers}", IMAGE]
    command[-1:-1] = ["--entrypoint", "sh"]
    command += ["/etc/agentrl-lb/render-config.sh"]
    subprocess.run(command, check=True, capture_output=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                if httpx.get(f"{url}/healthz", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, subprocess.run(["docker", "logs", name], capture_output=True)
            time.sleep(0.2)
        yield url
    finally:
        subprocess.run(["docker", "rm", "-f", name], capture_output=True)


def test_the_balancer_routes_forks_to_their_parents_replica() -> None:
    with ExitStack() as stack:
        (url_a, app_a), (url_b, app_b) = (stack.enter_context(serving(ServiceSettings())) for _ in range(2))
        lb_url = stack.enter_context(balancer({"env-a": url_a, "env-b": url_b}))

        async def main() -> None:
            async with EnvClient(lb_url, config=ClientConfig(transport="http")) as client:
                starts = [
                    await client.create_session(GUESS_NUMBER_ID, {"target": 9}, seed=0) for _ in range(4)
                ]
                homes = [app_a if s.session_id in app_a.state.sessions._sessions else app_b for s in starts]
                assert {id(home) for home in homes} == {id(app_a), id(app_b)}  # both replicas hold some
                for start, home in zip(starts, homes, strict=True):
                    await client.step(start.session_id, _guess(5))
                    forks = await client.fork_session(start.session_id, 2)
                    assert all(fork.session_id in home.state.sessions._sessions for fork in forks)
                    await client.close_session(start.session_id)  # the tree's route outlives its root
                    assert (await client.step(forks[0].session_id, _guess(9))).terminated
                    grandchild = (await client.fork_session(forks[1].session_id))[0]
                    assert (await client.step(grandchild.session_id, _guess(9))).reward == 1.0
                    for session_id in (forks[0].session_id, forks[1].session_id, grandchild.session_id):
                        await client.close_session(session_id)
                    with pytest.raises(SessionNotFound):  # forgotten with its last session
                        await client.step(forks[1].session_id, _guess(9))

        asyncio.run(main())
