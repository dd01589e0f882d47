"""The env fleet end to end: `docker-compose` brings up two env-service replicas, the session-aware load
balancer and Postgres (sandboxes/service/docker-compose.host.yml: the fleet of docker-compose.yml on
loopback ports); calc episodes (python tool in a real sandbox started through the Docker socket, then
submit) run through the load balancer with `rollout.run_episode` and a scripted engine; one replica is
killed while every first-wave episode is between its python call and its submit; every episode that died
with it is re-run (`agentrl.agent.retry`) on the surviving replica; the store in the stack's Postgres holds
every episode exactly once. Then the killed replica is started again (`docker start` of the same container:
same hostname, its service PID 1 again) and must reap the sandboxes its killed life left (its warm pool and
the sessions it held) within the bound; `docker-compose down` must leave zero sandbox containers.

Needs the fleet images (the test runs scripts/build_fleet_images.sh, seconds when they are up to date) and
docker-compose (scripts/setup_docker.sh installs it). Everything is torn down in a `finally`: the compose
project with its volume; sandboxes labelled with the project's name still there after `down` are counted as
leaked (the test fails) and removed.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import secrets
import shutil
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest
from sandbox_leaks import labelled_sandboxes
from tiny_tokenizers import byte_tokenizer

from agentrl.agent.engines.base import Completion, SamplingParams
from agentrl.agent.retry import RetriedEpisode, RetryConfig, infra_retry_counts, play_with_retries
from agentrl.agent.rollout import run_episode
from agentrl.agent.rollout_config import RolloutConfig
from agentrl.client import ClientConfig, EnvClient
from agentrl.sandbox.owner import OWNER_LABEL, parse_owner
from agentrl.service.embedded import free_loopback_port
from agentrl.store.repository import close_store, create_run, load_episodes, open_store, record_episodes
from agentrl.types import Episode

pytestmark = [pytest.mark.docker, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
COMPOSE_FILE = REPO / "sandboxes" / "service" / "docker-compose.host.yml"
CALC_ID = "agentrl/Calc-v0"
FIRST_WAVE = 12  # held between python and submit until env-1 is killed; about half of them live on env-1
SECOND_WAVE = 8  # started after the kill: only env-2 is left
STARTUP_TIMEOUT_S = 90.0
HOLD_TIMEOUT_S = 60.0
FLEET_LABEL = "agentrl.fleet"
POOL_SIZE = 4  # warm sandboxes per replica: the killed replica leaves its pool behind, as in issue 39
ORPHAN_GRACE_S, ORPHAN_REAP_INTERVAL_S = 5.0, 3.0  # the default grace; a short interval for a short test
REAP_BOUND_S = ORPHAN_GRACE_S + ORPHAN_REAP_INTERVAL_S + 10.0  # after the restarted replica is healthy
TOKENIZER = byte_tokenizer()
IM_END = TOKENIZER.convert_tokens_to_ids("<|im_end|>")
SAMPLING = SamplingParams(temperature=0.0, max_new_tokens=256)
ROLLOUT = RolloutConfig(max_turns=4, max_context_tokens=32_768)  # one token per byte: long prompts
RETRY = RetryConfig(max_attempts=3, backoff_s=0.5)
# The images check their health every 5 s (Postgres every 3 s), so `up` (the LB waits for healthy replicas)
# and each wait for a healthy fleet spent most of its time between two checks. A compose override checks
# every second here; only the interval changes, each check is still the image's own.
HEALTH_OVERRIDE = {
    "services": {name: {"healthcheck": {"interval": "1s"}} for name in ("env-1", "env-2", "lb", "postgres")}
}


# --- the stack -----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Fleet:
    project: str
    lb_url: str
    replica_urls: dict[str, str]
    db_url: str
    token: str
    environment: dict[str, str]
    compose_files: tuple[Path, ...]  # COMPOSE_FILE, then HEALTH_OVERRIDE (a temporary file)
    leaked: list[str] = field(default_factory=list)  # sandboxes left after `down` (filled by running_fleet)


def compose_command() -> list[str]:
    if shutil.which("docker-compose"):
        return ["docker-compose"]
    probe = subprocess.run(["docker", "compose", "version"], capture_output=True)
    if probe.returncode == 0:
        return ["docker", "compose"]
    pytest.fail("neither docker-compose nor the `docker compose` plugin is installed; run `make setup`")


def compose(fleet: Fleet, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    files = [option for path in fleet.compose_files for option in ("-f", str(path))]
    command = [*compose_command(), "-p", fleet.project, *files, *args]
    result = subprocess.run(command, env=fleet.environment, capture_output=True, text=True, timeout=180)
    if check and result.returncode != 0:
        raise AssertionError(f"{' '.join(command)} failed:\n{result.stdout}\n{result.stderr}")
    return result


def new_fleet(workdir: Path) -> Fleet:
    project = f"agentrl-fleet-test-{uuid.uuid4().hex[:8]}"
    override = workdir / "docker-compose.health.json"  # JSON is YAML to compose
    override.write_text(json.dumps(HEALTH_OVERRIDE))
    ports = {name: str(free_loopback_port()) for name in ("lb", "env_1", "env_2", "pg")}
    token, password = secrets.token_hex(16), secrets.token_hex(16)
    # sandboxes labelled with the project, so the test can count them (JSON without spaces: the image's
    # shell splits AGENTRL_SERVICE_ARGS on them)
    env_kwargs = {CALC_ID: {"pool_size": POOL_SIZE, "sandbox_labels": {FLEET_LABEL: project}}}
    service_args = (
        f"--orphan-grace {ORPHAN_GRACE_S} --orphan-reap-interval {ORPHAN_REAP_INTERVAL_S} --env-kwargs "
        + json.dumps(env_kwargs, separators=(",", ":"))
    )
    environment = {
        **os.environ,
        "AGENTRL_SERVICE_TOKEN": token,
        "AGENTRL_SERVICE_ARGS": service_args,
        "AGENTRL_LB_PORT": ports["lb"],
        "AGENTRL_ENV_1_PORT": ports["env_1"],
        "AGENTRL_ENV_2_PORT": ports["env_2"],
        "AGENTRL_PG_PORT": ports["pg"],
        "POSTGRES_USER": "agentrl",
        "POSTGRES_PASSWORD": password,
        "POSTGRES_DB": "agentrl",
    }
    return Fleet(
        project=project,
        lb_url=f"http://127.0.0.1:{ports['lb']}",
        replica_urls={
            name: f"http://127.0.0.1:{ports[key]}" for name, key in (("env-1", "env_1"), ("env-2", "env_2"))
        },
        db_url=f"postgresql+psycopg://agentrl:{password}@127.0.0.1:{ports['pg']}/agentrl",
        token=token,
        environment=environment,
        compose_files=(COMPOSE_FILE, override),
    )


@contextmanager
def running_fleet() -> Iterator[Fleet]:
    started = time.monotonic()
    build = subprocess.run(
        ["bash", str(REPO / "scripts" / "build_fleet_images.sh")], capture_output=True, text=True
    )
    assert build.returncode == 0, f"building the fleet images failed:\n{build.stdout}\n{build.stderr}"
    print(f"\nfleet: images checked or rebuilt in {time.monotonic() - started:.1f} s")
    workdir = tempfile.TemporaryDirectory(prefix="agentrl-fleet-test-")
    fleet = new_fleet(Path(workdir.name))
    try:
        compose(fleet, "up", "-d")
        wait_until_healthy(fleet)
        yield fleet
    finally:
        logs = compose(fleet, "logs", "--no-color", "--tail", "40", check=False).stdout
        # the replicas' stop_grace_period (30 s) is what `down` would wait without --timeout
        compose(fleet, "down", "-v", "--remove-orphans", "--timeout", "30", check=False)
        fleet.leaked.extend(remove_sandboxes(fleet.project))
        workdir.cleanup()
        if os.environ.get("AGENTRL_FLEET_LOGS"):
            print(logs)


def wait_until_healthy(fleet: Fleet) -> None:
    """Every container of the project reports healthy (their image HEALTHCHECKs), and the LB answers."""
    deadline = time.monotonic() + STARTUP_TIMEOUT_S
    while time.monotonic() < deadline:
        states = container_health(fleet.project)
        if len(states) == 4 and set(states.values()) == {"healthy"}:
            return
        time.sleep(0.5)
    logs = compose(fleet, "logs", "--no-color", "--tail", "30", check=False).stdout
    raise AssertionError(f"the fleet did not become healthy in {STARTUP_TIMEOUT_S:g} s: {states}\n{logs}")


def container_health(project: str) -> dict[str, str]:
    listing = subprocess.run(
        ["docker", "ps", "-q", "--filter", f"label=com.docker.compose.project={project}"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    if not listing:
        return {}
    inspected = subprocess.run(
        ["docker", "inspect", "--format", "{{.Name}} {{.State.Health.Status}}", *listing],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return dict(line.split(" ", 1) for line in inspected.splitlines() if " " in line)


def remove_sandboxes(project: str) -> list[str]:
    """Remove the project's sandbox containers; returns their ids (after `down` each one is a leak)."""
    ids = [entry["Id"] for entry in labelled_sandboxes({FLEET_LABEL: project})]
    if ids:
        subprocess.run(["docker", "rm", "-f", *ids], capture_output=True)
    return ids


def sandboxes_of_replica(fleet: Fleet, replica: str) -> set[str]:
    """The ids of the project's sandboxes whose owner is the current life of `replica`'s container."""
    container = compose(fleet, "ps", "-q", replica).stdout.strip()
    started = docker_inspect(container, "{{.State.StartedAt}}")
    found = set()
    for entry in labelled_sandboxes({FLEET_LABEL: fleet.project}):
        owner = parse_owner((entry.get("Labels") or {}).get(OWNER_LABEL, ""))
        if owner is not None and owner.container_id == container and owner.container_started_at == started:
            found.add(entry["Id"])
    return found


def docker_inspect(container: str, template: str) -> str:
    return subprocess.run(
        ["docker", "inspect", "--format", template, container], capture_output=True, text=True, check=True
    ).stdout.strip()


def existing(ids: set[str]) -> set[str]:
    return ids & {entry["Id"] for entry in labelled_sandboxes({})}


def restart_and_reap(fleet: Fleet, killed_life: set[str]) -> tuple[int, float]:
    """`docker start` the killed env-1 (same container), wait until the fleet is healthy again, then until
    the killed life's sandboxes are gone; returns (how many outlived `REAP_BOUND_S`, seconds it took)."""
    compose(fleet, "start", "env-1")
    started = time.monotonic()
    wait_until_healthy(fleet)
    deadline = time.monotonic() + REAP_BOUND_S
    while existing(killed_life) and time.monotonic() < deadline:
        time.sleep(0.5)
    return len(existing(killed_life)), time.monotonic() - started


# --- the scripted policy -------------------------------------------------------------------------------


def calc_task(index: int) -> dict[str, str]:
    a, b = 1000 + 37 * index, 17 + index
    return {"id": f"fleet-{index:03d}", "question": f"What is {a} * {b}?", "answer": str(a * b)}


def scripted_reply(context: str) -> str:
    """The calc policy, read off the decoded context: print the question's product with the python tool,
    then submit the printed number. The few-shot examples come first, so only text after the last
    question counts."""
    question = list(re.finditer(r"What is (\d+ \* \d+)\? Use the python tool", context))[-1]
    after = context[question.end() :]
    printed = re.search(r"exit code 0\n(-?\d+)", after)
    if printed is None:
        return tool_call("python", {"code": f"print({question.group(1)})"})
    return tool_call("submit", {"answer": printed.group(1)})


def tool_call(name: str, arguments: dict[str, str]) -> str:
    return f"<tool_call>{json.dumps({'name': name, 'arguments': arguments})}</tool_call>"


class ScriptedEngine:
    """Token-in/token-out like a model, but the reply is `scripted_reply`. Every submit waits on `gate`
    (the test opens it once env-1 is dead); `held` counts the episodes waiting there."""

    def __init__(self, gate: asyncio.Event) -> None:
        self.tokenizer = TOKENIZER
        self.gate = gate
        self.held = 0

    async def generate(self, prompt_ids: Sequence[int], params: SamplingParams) -> Completion:
        text = scripted_reply(TOKENIZER.decode(list(prompt_ids)))
        if '"submit"' in text and not self.gate.is_set():
            self.held += 1
            await self.gate.wait()
        ids = (*TOKENIZER.encode(text, add_special_tokens=False), IM_END)
        return Completion(tuple(ids), tuple(-0.1 for _ in ids), text, "stop", True)


# --- the run -------------------------------------------------------------------------------------------


async def play(client: EnvClient, engine: ScriptedEngine, index: int) -> RetriedEpisode:
    task = calc_task(index)

    async def once() -> Episode:
        return await run_episode(client, engine, CALC_ID, task, index, task["id"], SAMPLING, ROLLOUT)

    return await play_with_retries(once, RETRY)


async def kill_when_held(fleet: Fleet, engine: ScriptedEngine, held: int) -> tuple[float, set[str]]:
    """SIGKILL env-1 once `held` episodes wait at their submit; returns when, and the ids of the
    sandboxes env-1 owned then (its warm pool and the sessions it held)."""
    deadline = time.monotonic() + HOLD_TIMEOUT_S
    while engine.held < held:
        assert time.monotonic() < deadline, f"only {engine.held} of {held} episodes reached their submit"
        await asyncio.sleep(0.05)
    owned = await asyncio.to_thread(sandboxes_of_replica, fleet, "env-1")
    await asyncio.to_thread(compose, fleet, "kill", "env-1")
    killed_at = time.monotonic()
    engine.gate.set()
    return killed_at, owned


async def run_fleet(fleet: Fleet) -> tuple[list[RetriedEpisode], float, set[str]]:
    engine = ScriptedEngine(asyncio.Event())
    config = ClientConfig(retries=2, backoff_s=0.05, timeout_s=60.0)
    async with EnvClient(fleet.lb_url, token=fleet.token, config=config) as client:
        first = [asyncio.create_task(play(client, engine, i)) for i in range(FIRST_WAVE)]
        killed_at, killed_life = await kill_when_held(fleet, engine, FIRST_WAVE)
        second = [play(client, engine, FIRST_WAVE + i) for i in range(SECOND_WAVE)]
        results = await asyncio.gather(*first, *second)
    return list(results), killed_at, killed_life


def reaped_by(fleet: Fleet) -> dict[str, int]:
    """Orphaned sandboxes the replicas removed, by reason (their `sandboxes_reaped_total` metric)."""
    reaped: dict[str, int] = {}
    for url in fleet.replica_urls.values():
        text = httpx.get(
            f"{url}/metrics", headers={"authorization": f"Bearer {fleet.token}"}, trust_env=False
        )
        for reason, count in re.findall(r'sandboxes_reaped_total\{reason="(\w+)"\} (\d+)', text.text):
            reaped[reason] = reaped.get(reason, 0) + int(count)
    return reaped


def sessions_created(url: str, token: str) -> int:
    text = httpx.get(f"{url}/metrics", headers={"authorization": f"Bearer {token}"}, trust_env=False).text
    match = re.search(r"^agentrl_service_sessions_created_total (\d+)", text, re.MULTILINE)
    assert match, text
    return int(match.group(1))


def test_a_killed_replica_loses_no_episode_and_the_store_holds_each_once() -> None:
    started = time.monotonic()
    with running_fleet() as fleet:
        up_s = time.monotonic() - started  # includes the image check above
        results, killed_at, killed_life = asyncio.run(run_fleet(fleet))
        total = FIRST_WAVE + SECOND_WAVE
        counts = infra_retry_counts(results)

        # every episode completed, solved; the ones that died with env-1 were re-run
        finals = [result.episode for result in results]
        assert [e.stop_reason for e in finals] == ["terminated"] * total, [e.error for e in finals]
        assert all(e.success and e.reward == 1.0 for e in finals)
        assert counts["rerun_episodes"] >= 1, "no first-wave episode lived on env-1; the kill proved nothing"
        assert counts["infra_failed"] == 0
        for result in results:
            assert all(failed.error for failed in result.failed_attempts)

        # every session after the kill lives on env-2: it created exactly the attempts that succeeded
        assert container_health(fleet.project).get(f"/{fleet.project}_env-1_1") is None  # env-1 is gone
        assert sessions_created(fleet.replica_urls["env-2"], fleet.token) == total

        # the store: one row per episode slot, none of the failed attempts
        store = open_store(fleet.db_url)
        try:
            run_id = create_run(store, "fleet-test", CALC_ID, {"episodes": total})
            record_episodes(store, run_id, 0, "train", finals)
            stored = load_episodes(store, run_id)
        finally:
            close_store(store)
        task_ids = [row["task_id"] for row in stored]
        assert sorted(task_ids) == [calc_task(i)["id"] for i in range(total)]
        assert len({row["uid"] for row in stored}) == total
        failed_uids = {failed.episode_id for r in results for failed in r.failed_attempts}
        assert not failed_uids & {row["uid"] for row in stored}
        assert all(row["num_turns"] == 2 and row["reward"] == 1.0 for row in stored)

        run_s = time.monotonic() - killed_at
        # the killed replica comes back in the same container and reaps what its killed life left
        outlived, reaped_s = restart_and_reap(fleet, killed_life)
        print(
            f"fleet: up in {up_s:.1f} s; {total} episodes, {counts['rerun_episodes']} re-run after "
            f"env-1 was killed ({counts['reruns']} re-runs), {len(stored)} in the store, "
            f"{len(task_ids) - len(set(task_ids))} duplicates; {run_s:.1f} s from the kill to the end; "
            f"env-1 owned {len(killed_life)} sandboxes when killed, {outlived} outlived its restart "
            f"({reaped_s:.1f} s from `docker start` to healthy and reaped; reaped by reason: "
            f"{reaped_by(fleet)})"
        )
        assert len(killed_life) >= POOL_SIZE, "env-1 held no warm pool when killed: the kill proved nothing"
        assert outlived == 0, f"{outlived} sandboxes of the killed env-1 outlived its restart"
    assert not subprocess.run(
        ["docker", "ps", "-aq", "--filter", f"label=com.docker.compose.project={fleet.project}"],
        capture_output=True,
        text=True,
    ).stdout.strip(), "the compose project left containers behind"
    assert not fleet.leaked, f"{len(fleet.leaked)} sandbox containers outlived `docker-compose down`"
    print(f"fleet: total {time.monotonic() - started:.1f} s")
