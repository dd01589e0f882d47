"""Orphaned sandboxes on a real engine (issue 39): the env service runs as PID 1 of a container (the
`agentrl/service` image of the fleet, host networking), fills a warm pool of calc sandboxes and holds a
session; the container is SIGKILLed (`docker kill`) and started again: same hostname, same pid, same
container. The new service must take its predecessor's sandboxes for orphans and remove them within the
bound (`--orphan-grace` plus one `--orphan-reap-interval`, plus its start-up); then `docker stop` (SIGTERM)
must leave none of its own. Every count is of real containers, by a label unique to the test.

`AGENTRL_SERVICE_IMAGE` runs the same sequence against another image, without the orphan flags (an image
built from the code before issue 39 knows none, and leaks every sandbox of the killed life).
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest
from sandbox_leaks import labelled_sandboxes

from agentrl.client import ClientConfig, EnvClient
from agentrl.sandbox.docker import OWNER_LABEL
from agentrl.sandbox.owner import parse_owner
from agentrl.service.embedded import free_loopback_port
from agentrl.types import Action, ToolCall

pytestmark = [pytest.mark.docker, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
OUR_IMAGE = "agentrl/service:latest"
IMAGE = os.environ.get("AGENTRL_SERVICE_IMAGE", OUR_IMAGE)
CALC_ID = "agentrl/Calc-v0"
TEST_LABEL = "agentrl.test"
POOL = 3  # warm sandboxes; one more is held by the session
GRACE_S, INTERVAL_S = 1.0, 2.0
STARTUP_S = 30.0  # the service's own start in the container (imports, uvicorn) on a loaded host
BOUND_S = GRACE_S + INTERVAL_S + STARTUP_S


@pytest.fixture(scope="module")
def service_image() -> str:
    if IMAGE == OUR_IMAGE:
        build = subprocess.run(
            ["bash", str(REPO / "scripts" / "build_fleet_images.sh")], capture_output=True, text=True
        )
        assert build.returncode == 0, f"building the fleet images failed:\n{build.stdout}\n{build.stderr}"
    return IMAGE


def docker(*args: str, check: bool = True) -> str:
    result = subprocess.run(["docker", *args], capture_output=True, text=True, timeout=120)
    if check and result.returncode != 0:
        raise AssertionError(f"docker {' '.join(args)} failed: {result.stderr}")
    return result.stdout.strip()


@pytest.fixture
def replica(service_image: str) -> Iterator[tuple[str, str, str]]:
    """(container name, service URL, the test's sandbox label value); removed with its sandboxes after."""
    name, tag, port = f"agentrl-reaper-test-{uuid.uuid4().hex[:8]}", uuid.uuid4().hex, free_loopback_port()
    env_kwargs = {CALC_ID: {"pool_size": POOL, "sandbox_labels": {TEST_LABEL: tag}}}
    orphan_args = (
        f"--orphan-grace {GRACE_S} --orphan-reap-interval {INTERVAL_S} " if IMAGE == OUR_IMAGE else ""
    )
    args = f"{orphan_args}--env-kwargs {json.dumps(env_kwargs, separators=(',', ':'))}"
    docker(
        "run", "-d", "--name", name, "--network", "host",
        "-v", "/var/run/docker.sock:/var/run/docker.sock",
        "-e", "AGENTRL_SERVICE_HOST=127.0.0.1", "-e", f"AGENTRL_SERVICE_PORT={port}",
        "-e", f"AGENTRL_SERVICE_ARGS={args}",
        service_image,
    )  # fmt: skip
    try:
        yield name, f"http://127.0.0.1:{port}", tag
    finally:
        if os.environ.get("AGENTRL_REAPER_LOGS"):
            print(docker("logs", "--tail", "60", name, check=False))
        docker("rm", "-f", name, check=False)
        for entry in labelled_sandboxes({TEST_LABEL: tag}):
            docker("rm", "-f", entry["Id"], check=False)


def settle(predicate: Callable[[], bool], timeout_s: float) -> float | None:
    """Seconds until `predicate()` holds, or None if it still does not after `timeout_s`."""
    started = time.monotonic()
    while not predicate():
        if time.monotonic() - started > timeout_s:
            return None
        time.sleep(0.2)
    return time.monotonic() - started


def wait_for(predicate: Callable[[], bool], timeout_s: float, what: str) -> float:
    waited = settle(predicate, timeout_s)
    assert waited is not None, f"{what} did not happen within {timeout_s:g} s"
    return waited


def healthy(url: str) -> bool:
    try:
        return httpx.get(f"{url}/healthz", timeout=1.0, trust_env=False).status_code == 200
    except httpx.HTTPError:
        return False


async def hold_a_sandbox(url: str) -> None:
    """One calc session whose python call takes a sandbox from the pool (the pool starts then)."""
    async with EnvClient(url, config=ClientConfig(timeout_s=60.0)) as client:
        session = await client.create_session(
            CALC_ID, {"id": "reaper", "question": "What is 1 + 1?", "answer": "2"}, seed=0
        )
        call = ToolCall(name="python", arguments={"code": "print(1 + 1)"})
        result = await client.step(session.session_id, Action(text="", tool_calls=(call,)))
        assert "2" in result.observation


def ids(tag: str) -> set[str]:
    return {entry["Id"] for entry in labelled_sandboxes({TEST_LABEL: tag})}


def reaped_metric(url: str) -> dict[str, int]:
    text = httpx.get(f"{url}/metrics", trust_env=False).text
    return {m[0]: int(m[1]) for m in re.findall(r'sandboxes_reaped_total\{reason="(\w+)"\} (\d+)', text)}


def test_a_replica_killed_as_pid_1_and_started_again_reaps_its_predecessors_sandboxes(
    replica: tuple[str, str, str],
) -> None:
    name, url, tag = replica
    wait_for(lambda: healthy(url), STARTUP_S, "the service answering /healthz")
    asyncio.run(hold_a_sandbox(url))
    wait_for(lambda: len(ids(tag)) == POOL + 1, 60.0, f"{POOL} warm sandboxes plus the held one")
    first_life = ids(tag)
    owners = {
        (entry.get("Labels") or {}).get(OWNER_LABEL, "") for entry in labelled_sandboxes({TEST_LABEL: tag})
    }
    pid_1, container_id = docker("inspect", "--format", "{{.State.Pid}} {{.Id}}", name).split()

    docker("kill", name)  # SIGKILL to PID 1: no shutdown runs
    assert ids(tag) == first_life, "the sandboxes of a SIGKILLed service vanished by themselves"
    docker("start", name)
    gone_after = settle(lambda: not ids(tag) & first_life, BOUND_S)
    left_after_restart = len(ids(tag) & first_life)
    wait_for(lambda: healthy(url), STARTUP_S, "the restarted service answering /healthz")
    reaped = reaped_metric(url)

    asyncio.run(hold_a_sandbox(url))  # the second life fills a pool and holds a session, then stops
    wait_for(lambda: len(ids(tag) - first_life) == POOL + 1, 60.0, "the second life's sandboxes")
    docker("stop", "--time", "30", name)  # SIGTERM: the service removes what it owns
    left_after_stop = len(ids(tag))

    print(
        f"\nreaper: {len(first_life)} sandboxes of the killed life (owners {sorted(owners)}, PID 1 was "
        f"host pid {pid_1}); {left_after_restart} of them left {BOUND_S:g} s after `docker start` "
        f"(gone after {'-' if gone_after is None else f'{gone_after:.1f}'} s); {left_after_stop} sandboxes "
        f"left after `docker stop`; metric {reaped}"
    )
    assert left_after_restart == 0, f"{left_after_restart} sandboxes of the killed life outlived the bound"
    parsed = [parse_owner(owner) for owner in owners]
    assert all(o is not None and o.pid == 1 and o.container_id == container_id for o in parsed), owners
    assert reaped.get("container_restarted") == POOL + 1, reaped
    assert left_after_stop == 0
