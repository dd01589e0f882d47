"""EnvClient against in-process replicas: round robin, pinning, failover, bounded retries with backoff."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
from fastapi import FastAPI
from fixtures_envs import GUESS_NUMBER_ID

from agentrl import client as client_module
from agentrl.client import ClientConfig, EnvClient, parse_retry_after, retry_delay
from agentrl.errors import INFRA_ERRORS, InvalidTask, ServiceUnavailable
from agentrl.service import ServiceSettings, create_app
from agentrl.tasks import load_tasks
from agentrl.types import Action, ToolCall

URLS = ["http://replica-a.test", "http://replica-b.test"]
FAST = ClientConfig(retries=2, backoff_s=0.001, max_backoff_s=0.01, down_for_s=60)


class Replicas(httpx.AsyncBaseTransport):
    """Routes by host to in-process apps; a host in `dead` refuses connections like a stopped server."""

    def __init__(self, apps: dict[str, FastAPI]) -> None:
        self.transports = {host: httpx.ASGITransport(app=app) for host, app in apps.items()}
        self.dead: set[str] = set()
        self.requests: list[tuple[str, str, str]] = []

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        host = request.url.host
        self.requests.append((host, request.method, request.url.path))
        if host in self.dead:
            raise httpx.ConnectError("connection refused", request=request)
        return await self.transports[host].handle_async_request(request)


@contextlib.asynccontextmanager
async def _fleet(settings: ServiceSettings) -> AsyncIterator[tuple[dict[str, FastAPI], Replicas, EnvClient]]:
    apps = {httpx.URL(url).host: create_app(settings) for url in URLS}
    async with contextlib.AsyncExitStack() as stack:
        for app in apps.values():
            await stack.enter_async_context(app.router.lifespan_context(app))
        transport = Replicas(apps)
        client = await stack.enter_async_context(EnvClient(URLS, transport=transport, config=FAST))
        yield apps, transport, client


def _guess(number: int) -> Action:
    return Action(text="", tool_calls=(ToolCall(name="guess", arguments={"number": number}),))


def _live(apps: dict[str, FastAPI]) -> list[int]:
    return [len(app.state.sessions) for app in apps.values()]


def test_sessions_go_round_robin_and_stay_pinned() -> None:
    async def main() -> None:
        async with _fleet(ServiceSettings()) as (apps, transport, client):
            starts = [await client.create_session(GUESS_NUMBER_ID, {"target": 7}, seed=0) for _ in range(4)]
            assert _live(apps) == [2, 2]
            for start in starts:
                assert (await client.step(start.session_id, _guess(7))).reward == 1.0
            hosts = {start.session_id: host for host, method, path in transport.requests
                     for start in starts if path == f"/v1/sessions/{start.session_id}/step"}  # fmt: skip
            assert sorted(hosts.values()) == ["replica-a.test"] * 2 + ["replica-b.test"] * 2
            for start in starts:
                await client.close_session(start.session_id)
            assert _live(apps) == [0, 0]

    asyncio.run(main())


def test_a_dead_replica_fails_its_sessions_and_new_ones_go_elsewhere() -> None:
    async def main() -> None:
        async with _fleet(ServiceSettings()) as (apps, transport, client):
            on_a = await client.create_session(GUESS_NUMBER_ID, {}, seed=0)
            on_b = await client.create_session(GUESS_NUMBER_ID, {}, seed=0)
            transport.dead.add("replica-a.test")
            with pytest.raises(ServiceUnavailable, match="replica-a.test unreachable") as caught:
                await client.step(on_a.session_id, _guess(1))
            assert isinstance(caught.value, INFRA_ERRORS)
            await client.step(on_b.session_id, _guess(1))
            for _ in range(3):  # a is marked down: every new session lands on b
                await client.create_session(GUESS_NUMBER_ID, {}, seed=0)
            assert _live(apps) == [1, 4]
            assert await client.health()
            assert await client.list_envs()
            with pytest.raises(ServiceUnavailable):  # close is retried, then gives up
                await client.close_session(on_a.session_id)
            closes = [r for r in transport.requests if r[1] == "DELETE"]
            assert len(closes) == FAST.retries + 1
            transport.dead.add("replica-b.test")
            with pytest.raises(ServiceUnavailable, match="no env service replica.*2 tried"):
                await client.create_session(GUESS_NUMBER_ID, {}, seed=0)
            assert not await client.health()

    asyncio.run(main())


def test_a_full_replica_is_skipped_for_its_retry_after() -> None:
    async def main() -> None:
        async with _fleet(ServiceSettings(max_sessions=1, retry_after_s=30)) as (apps, transport, client):
            await client.create_session(GUESS_NUMBER_ID, {}, seed=0)  # a
            await client.create_session(GUESS_NUMBER_ID, {}, seed=0)  # b
            with pytest.raises(ServiceUnavailable, match="(?s)429.*429"):
                await client.create_session(GUESS_NUMBER_ID, {}, seed=0)
            assert _live(apps) == [1, 1]

    asyncio.run(main())


def test_idempotent_calls_retry_503_honouring_retry_after(monkeypatch: pytest.MonkeyPatch) -> None:
    waits: list[float] = []

    async def no_sleep(seconds: float) -> None:
        waits.append(seconds)

    monkeypatch.setattr(client_module.asyncio, "sleep", no_sleep)
    answers = iter(
        [
            httpx.Response(
                503, headers={"retry-after": "2"}, json={"error": {"type": "X", "message": "busy"}}
            ),
            httpx.Response(502),
            httpx.Response(200, json={"envs": [{"id": "a"}]}),
        ]
    )
    calls: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        calls.append(request.headers.get("authorization", ""))
        return next(answers)

    async def main() -> None:
        config = ClientConfig(retries=3, backoff_s=0.5)
        async with EnvClient(
            URLS[0], transport=httpx.MockTransport(handler), token="t", config=config
        ) as client:
            assert await client.list_envs() == [{"id": "a"}]

    asyncio.run(main())
    assert waits == [2.0, 1.0] and calls == ["Bearer t"] * 3


def test_steps_are_never_retried() -> None:
    calls: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        calls.append(request.url.path)
        return httpx.Response(503, json={"error": {"type": "SandboxLost", "message": "gone"}})

    async def main() -> None:
        async with EnvClient(URLS[0], transport=httpx.MockTransport(handler), config=FAST) as client:
            with pytest.raises(ServiceUnavailable, match="503.*SandboxLost"):
                await client.step("abc", _guess(1))

    asyncio.run(main())
    assert calls == ["/v1/sessions/abc/step"]


def test_retry_delay_backs_off_exponentially_with_caps() -> None:
    config = ClientConfig(backoff_s=0.1, max_backoff_s=0.5, max_retry_after_s=10)
    assert [retry_delay(attempt, None, config) for attempt in range(4)] == [0.1, 0.2, 0.4, 0.5]
    assert retry_delay(0, 3.0, config) == 3.0 and retry_delay(0, 60.0, config) == 10
    assert parse_retry_after("5") == 5.0 and parse_retry_after("-1") == 0.0
    assert parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT") is None and parse_retry_after(None) is None


def test_a_fleet_client_asks_for_live_replicas_when_its_own_are_gone_and_when_stale() -> None:
    """`discover` (a Ray fleet's live replicas) replaces the list when no known replica can take a session
    and every `rediscover_s`; sessions stay pinned to the replica that holds them."""

    async def main() -> None:
        apps = {httpx.URL(url).host: create_app(ServiceSettings()) for url in URLS}
        live = [URLS[0]]
        asked: list[int] = []

        async def discover() -> list[str]:
            asked.append(len(live))
            return list(live)

        async with contextlib.AsyncExitStack() as stack:
            for app in apps.values():
                await stack.enter_async_context(app.router.lifespan_context(app))
            transport = Replicas(apps)
            config = ClientConfig(retries=0, backoff_s=0.001, down_for_s=60, rediscover_s=3600)
            client = await stack.enter_async_context(
                EnvClient([URLS[0]], transport=transport, config=config, discover=discover)
            )
            on_a = await client.create_session(GUESS_NUMBER_ID, {"target": 1}, seed=0)
            assert asked == []  # nothing failed and the list is fresh
            transport.dead.add("replica-a.test")  # a's node died; the fleet restarted it as b
            live[:] = [URLS[1]]
            on_b = await client.create_session(GUESS_NUMBER_ID, {"target": 1}, seed=0)
            assert asked == [1] and [r.url for r in client.replicas] == [URLS[1]]
            assert _live(apps) == [1, 1]
            with pytest.raises(ServiceUnavailable):  # the session on a stays pinned to a: an infra failure
                await client.step(on_a.session_id, _guess(1))
            assert (await client.step(on_b.session_id, _guess(1))).reward == 1.0

            transport.dead.clear()  # a came back; the client learns it at the next stale check
            live[:] = URLS
            client.config = ClientConfig(retries=0, rediscover_s=0.0)
            await client.create_session(GUESS_NUMBER_ID, {}, seed=0)
            assert [r.url for r in client.replicas] == URLS

    asyncio.run(main())


def test_a_fleet_with_no_live_replica_raises_one_infra_error_naming_why() -> None:
    async def main() -> None:
        async def discover() -> list[str]:
            raise ServiceUnavailable("no env-service replica of the Ray fleet answers")

        def handler(request: httpx.Request) -> httpx.Response:
            raise httpx.ConnectError("connection refused", request=request)

        transport = httpx.MockTransport(handler)
        config = ClientConfig(backoff_s=0.001, max_backoff_s=0.01, fleet_wait_s=0.05)
        async with EnvClient(URLS[0], transport=transport, config=config, discover=discover) as client:
            with pytest.raises(ServiceUnavailable, match="Ray fleet answers") as caught:
                await client.create_session(GUESS_NUMBER_ID, {}, seed=0)
            assert isinstance(caught.value, INFRA_ERRORS)

    asyncio.run(main())


def test_a_refused_task_names_its_file_and_line_and_reaches_the_env_unchanged(tmp_path: Path) -> None:
    """What `agentrl train` prints when the env refuses a task: the trainer's episodes open their sessions
    through `EnvClient.create_session`, and its `InvalidTask` names the task file and line."""
    folder = tmp_path / "tasks" / "guess"
    folder.mkdir(parents=True)
    (folder / "train.jsonl").write_text('{"id": "ok", "target": 3}\n\n{"id": "big", "target": 999}\n')
    tasks = load_tasks(tmp_path / "tasks", "guess", "train")
    assert tasks[1] == {"id": "big", "target": 999}  # the record is the file's object, nothing added

    async def scenario() -> None:
        async with _fleet(ServiceSettings()) as (_, _, client):
            await client.create_session(GUESS_NUMBER_ID, tasks[0], seed=0)
            with pytest.raises(InvalidTask) as refused:
                await client.create_session(GUESS_NUMBER_ID, tasks[1], seed=0)
            message = str(refused.value)
            assert f"task 'big' ({folder / 'train.jsonl'}:3)" in message
            assert "got 999" in message  # the env's own message

    asyncio.run(scenario())
