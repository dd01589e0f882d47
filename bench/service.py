"""Benchmark of the env service's wire against OpenEnv, side by side in one run; prints ONE JSON object.

    .venv/bin/python bench/service.py          # full: 8 s a point, OpenEnv on 1 and 2 workers, 256 sandboxes
    .venv/bin/python bench/service.py --quick  # under a minute: 1.5 s a point, 16 sandboxes

Every server is a child process on 127.0.0.1; this process is the load generator, driving each server
with the client a user would use: agentrl's `EnvClient` (the runner's client) and OpenEnv's own async
`EnvClient` (one WebSocket per session, its fastest mode). Each point opens `concurrency` sessions, runs one
loop per session stepping it as fast as replies come for a fixed time, and counts completed steps.

Keys:
- `steps_per_s`: {concurrency: steps/s} for `agentrl/Echo-v0` (a trivial non-sandboxed env) on one service
  process over the best wire, "ws" (one multiplexed WebSocket, `ClientConfig(transport="ws")`);
  `http_steps_per_s`: the same over "http" (the default wire, httpx); `p50_ms`/`p99_ms`: step latency over
  "ws" at concurrency 128 on one process;
- `modes`: steps/s at concurrency 128 over "ws" on one replica and (full mode) on two replicas (two service
  processes on two ports, sessions spread by the client: how the fleet uses more cores); `best_steps_per_s`
  is the best of them;
- `openenv_steps_per_s`: OpenEnv (`openenv-core`) serving its template echo env at concurrency 128, the best
  of its modes measured (`openenv_modes`: one uvicorn worker, and two in full mode);
  `ratio_vs_openenv` = `best_steps_per_s / openenv_steps_per_s`, best mode against best mode;
- `sandboxed_sessions`: `agentrl/Calc-v0` sessions open at once, each having run Python in its own Docker
  sandbox, with zero errors (`sandboxed_errors` counts failures; `sandboxed_seconds` the wall time);
- `errors`: failed echo steps over all points (expected 0); `load_avg_1m` at the start (the machine is shared:
  read every figure next to it).

Sandboxes carry the label `agentrl.bench=service-<pid>` and are reaped when the run ends.
What this is not: a test of correctness (tests/ are) or of the sandbox layer (bench/sandbox.py is).
Needs the `bench` extra (`pip install -e .[bench]`) for OpenEnv, and Docker with the sandbox image.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import harness

from agentrl.client import ClientConfig, EnvClient
from agentrl.env.builtin_echo import ECHO_ID
from agentrl.sandbox.docker import reap
from agentrl.service.embedded import LOOPBACK, EmbeddedService, _answers, free_loopback_port
from agentrl.types import Action, ToolCall

CONCURRENCIES = (1, 16, 128)
CALC_ID = "agentrl/Calc-v0"
CALC_TASK = {"id": "bench-calc", "question": "What is 2 + 2?", "answer": "4"}
BENCH_LABEL = "agentrl.bench"
ECHO_MODULE = "agentrl.env.builtin_echo"


@dataclass(frozen=True)
class Counts:
    seconds_per_point: float
    warmup_s: float
    openenv_workers: tuple[int, ...]
    max_replicas: int
    sandboxed: int


QUICK = Counts(seconds_per_point=1.5, warmup_s=0.3, openenv_workers=(1,), max_replicas=1, sandboxed=16)
FULL = Counts(seconds_per_point=8.0, warmup_s=1.0, openenv_workers=(1, 2), max_replicas=2, sandboxed=256)


@dataclass
class Point:
    steps: int
    errors: int
    seconds: float
    latencies_s: list[float]

    @property
    def steps_per_s(self) -> float:
        return self.steps / self.seconds


# ---- the load generator --------------------------------------------------------------------------------


async def drive(open_session: Any, concurrency: int, counts: Counts) -> Point:
    """Open `concurrency` sessions (`open_session()` -> an async `step()`), warm up, then step them all for
    `seconds_per_point`, counting steps and errors and timing each step."""
    steppers = await asyncio.gather(*(open_session() for _ in range(concurrency)))
    point = Point(0, 0, counts.seconds_per_point, [])
    started = time.perf_counter()
    measuring_from = started + counts.warmup_s
    stop = measuring_from + counts.seconds_per_point

    async def loop(step: Any) -> None:
        while (now := time.perf_counter()) < stop:
            try:
                await step()
            except Exception:
                point.errors += 1
                continue
            if now >= measuring_from:
                point.steps += 1
                point.latencies_s.append(time.perf_counter() - now)

    await asyncio.gather(*(loop(step) for step in steppers))
    return point


async def agentrl_point(url: str | list[str], transport: str, concurrency: int, counts: Counts) -> Point:
    config = ClientConfig(transport=transport)  # type: ignore[arg-type]
    session_ids: list[str] = []
    async with EnvClient(url, config=config) as client:
        action = Action(text="", tool_calls=(ToolCall(name="echo", arguments={"text": "hello"}),))

        async def open_session() -> Any:
            start = await client.create_session(ECHO_ID, {}, seed=0)
            session_ids.append(start.session_id)
            return lambda: client.step(start.session_id, action)

        point = await drive(open_session, concurrency, counts)
        await asyncio.gather(*(client.close_session(session_id) for session_id in session_ids))
    return point


async def openenv_point(url: str, concurrency: int, counts: Counts) -> Point:
    client_cls, action_cls, _ = openenv_types()
    clients: list[Any] = []

    async def open_session() -> Any:
        client = client_cls(base_url=url)
        clients.append(client)
        await client.connect()
        await client.reset()
        action = action_cls(message="hello")
        return lambda: client.step(action)

    try:
        return await drive(open_session, concurrency, counts)
    finally:
        for client in clients:
            with contextlib.suppress(Exception):
                await client.close()


async def sandboxed_sessions(url: str, count: int, wave: int = 32) -> dict[str, Any]:
    """Open `count` calc sessions over "ws", each running Python in its own sandbox (started `wave` at a
    time, as a runner's groups would arrive), then step all of them at once while all are open."""
    started = time.perf_counter()
    run = Action(text="", tool_calls=(ToolCall(name="python", arguments={"code": "print(2 + 2)"}),))
    errors: list[str] = []
    async with EnvClient(url, config=ClientConfig(transport="ws")) as client:
        session_ids: list[str] = []

        async def step(session_id: str) -> None:
            try:
                result = await client.step(session_id, run)
                if not result.observation.startswith("exit code 0\n4"):
                    errors.append(result.observation)
            except Exception as exc:
                errors.append(f"step: {exc!r}")

        async def open_and_step(seed: int) -> None:
            try:
                start = await client.create_session(CALC_ID, CALC_TASK, seed=seed)
            except Exception as exc:
                errors.append(f"create: {exc!r}")
                return
            session_ids.append(start.session_id)
            await step(start.session_id)

        for first in range(0, count, wave):
            await asyncio.gather(*(open_and_step(seed) for seed in range(first, min(first + wave, count))))
        await asyncio.gather(*(step(session_id) for session_id in session_ids))  # all open at once
        live = len(session_ids) if not errors else 0
        await asyncio.gather(*(client.close_session(session_id) for session_id in session_ids))
    return {
        "sandboxed_sessions": live,
        "sandboxed_errors": len(errors),
        "sandboxed_seconds": round(time.perf_counter() - started, 1),
        **({"sandboxed_first_error": errors[0][:300]} if errors else {}),
    }


# ---- OpenEnv: its template echo env, server and client ------------------------------------------------


def openenv_types() -> tuple[type, type, type]:
    """OpenEnv's template echo env ("openenv init"): client class, action and observation models."""
    from openenv.core import EnvClient as OpenEnvClient
    from openenv.core.client_types import StepResult
    from openenv.core.env_server.types import Action as OpenEnvAction
    from openenv.core.env_server.types import Observation, State

    class EchoAction(OpenEnvAction):
        message: str

    class EchoObservation(Observation):
        echoed_message: str = ""
        message_length: int = 0

    class EchoClient(OpenEnvClient):  # type: ignore[type-arg]
        def _step_payload(self, action: Any) -> dict[str, Any]:
            return {"message": action.message}

        def _parse_result(self, payload: dict[str, Any]) -> Any:
            data = payload.get("observation", {})
            observation = EchoObservation(
                echoed_message=data.get("echoed_message", ""),
                message_length=data.get("message_length", 0),
                done=payload.get("done", False),
                reward=payload.get("reward"),
            )
            return StepResult(observation=observation, reward=payload.get("reward"), done=observation.done)

        def _parse_state(self, payload: dict[str, Any]) -> Any:
            return State(episode_id=payload.get("episode_id"), step_count=payload.get("step_count", 0))

    return EchoClient, EchoAction, EchoObservation


def build_openenv_app() -> Any:
    """The uvicorn app factory of the OpenEnv server (runs in its worker processes)."""
    from uuid import uuid4

    from openenv.core.env_server.http_server import create_app
    from openenv.core.env_server.interfaces import Environment
    from openenv.core.env_server.types import State

    _, action_cls, observation_cls = openenv_types()

    class EchoEnvironment(Environment):  # as in OpenEnv's template, `openenv init`
        SUPPORTS_CONCURRENT_SESSIONS = True

        def __init__(self) -> None:
            self._state = State(episode_id=str(uuid4()), step_count=0)

        def reset(self, *args: Any, **kwargs: Any) -> Any:
            self._state = State(episode_id=str(uuid4()), step_count=0)
            return observation_cls(echoed_message="ready", message_length=0, done=False, reward=0.0)

        def step(self, action: Any, *args: Any, **kwargs: Any) -> Any:
            self._state.step_count += 1
            message = action.message
            return observation_cls(
                echoed_message=message, message_length=len(message), done=False, reward=len(message) * 0.1
            )

        @property
        def state(self) -> Any:
            return self._state

    return create_app(EchoEnvironment, action_cls, observation_cls, env_name="echo", max_concurrent_envs=512)


@contextlib.contextmanager
def openenv_server(workers: int, log_path: Path) -> Any:
    port = free_loopback_port()
    command = [
        sys.executable, "-m", "uvicorn", "service:build_openenv_app", "--factory",
        "--app-dir", str(Path(__file__).parent), "--host", LOOPBACK, "--port", str(port),
        "--workers", str(workers), "--log-level", "warning",
    ]  # fmt: skip
    with log_path.open("ab") as log:
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://{LOOPBACK}:{port}"
    try:
        deadline = time.monotonic() + 60
        while not _answers(f"{url}/health"):
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the OpenEnv server did not start; see {log_path}")
            time.sleep(0.2)
        yield url
    finally:
        process.terminate()
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


# ---- the run -------------------------------------------------------------------------------------------


def percentile_ms(values: list[float], q: float) -> float:
    """Nearest-rank percentile, in milliseconds."""
    ordered = sorted(values)
    index = max(0, min(len(ordered) - 1, int(round(q / 100 * len(ordered) + 0.5)) - 1))
    return round(ordered[index] * 1000, 2)


def run(counts: Counts, workdir: Path, sandboxed: bool) -> dict[str, Any]:
    result: dict[str, Any] = {"load_avg_1m": round(os.getloadavg()[0], 2)}
    errors = 0
    bench_label = {BENCH_LABEL: f"service-{os.getpid()}"}  # every sandbox of this run, reaped at the end
    env_kwargs = {CALC_ID: {"sandbox_labels": bench_label}}
    with contextlib.ExitStack() as cleanup:
        if sandboxed:
            cleanup.callback(reap, bench_label)
        service = cleanup.enter_context(
            EmbeddedService(workdir / "agentrl-service.log", preload=[ECHO_MODULE], env_kwargs=env_kwargs)
        )
        # ours at 128 and OpenEnv at 128 are measured back to back: the machine's load drifts
        result["steps_per_s"] = {}
        for concurrency in CONCURRENCIES:
            point = asyncio.run(agentrl_point(service.url, "ws", concurrency, counts))
            result["steps_per_s"][concurrency] = round(point.steps_per_s)
            errors += point.errors
        result["p50_ms"] = percentile_ms(point.latencies_s, 50)
        result["p99_ms"] = percentile_ms(point.latencies_s, 99)
        ours = {"ws_1_replica": result["steps_per_s"][128]}
        for replicas in range(2, counts.max_replicas + 1):  # the fleet's way to use more cores
            with contextlib.ExitStack() as more:
                urls = [service.url] + [
                    more.enter_context(
                        EmbeddedService(workdir / f"replica-{i}.log", preload=[ECHO_MODULE])
                    ).url
                    for i in range(1, replicas)
                ]
                point = asyncio.run(agentrl_point(urls, "ws", 128, counts))
            ours[f"ws_{replicas}_replicas"] = round(point.steps_per_s)
            errors += point.errors
        modes: dict[str, int] = {}
        result["openenv_errors"] = 0
        for workers in counts.openenv_workers:
            with openenv_server(workers, workdir / f"openenv-{workers}.log") as url:
                point = asyncio.run(openenv_point(url, 128, counts))
            modes[f"ws_{workers}_worker{'s' if workers > 1 else ''}"] = round(point.steps_per_s)
            result["openenv_errors"] += point.errors
        result["http_steps_per_s"] = {}
        for concurrency in CONCURRENCIES:
            point = asyncio.run(agentrl_point(service.url, "http", concurrency, counts))
            result["http_steps_per_s"][concurrency] = round(point.steps_per_s)
            errors += point.errors
        if sandboxed:
            result.update(asyncio.run(sandboxed_sessions(service.url, counts.sandboxed)))
    result["modes"] = ours
    result["best_steps_per_s"] = max(ours.values())
    result["openenv_steps_per_s"] = max(modes.values())
    result["openenv_modes"] = modes
    result["ratio_vs_openenv"] = round(result["best_steps_per_s"] / result["openenv_steps_per_s"], 2)
    result["errors"] = errors
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="small counts, under a minute")
    parser.add_argument("--no-sandbox", action="store_true", help="skip the sandboxed sessions (no Docker)")
    harness.add_out_argument(parser, "service")
    args = parser.parse_args(argv)
    counts = QUICK if args.quick else FULL
    with tempfile.TemporaryDirectory(prefix="agentrl-bench-service-") as tmp:
        result = run(counts, Path(tmp), sandboxed=not args.no_sandbox)
    result["mode"] = "quick" if args.quick else "full"
    baseline = "OpenEnv's server on the same machine, same run"
    harness.emit("service", result, baseline=baseline, out=harness.out_path(args, "service"), argv=argv)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
