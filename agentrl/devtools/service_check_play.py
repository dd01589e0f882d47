"""The episodes of `agentrl envs check` (`agentrl/devtools/service_check.py`) through a real env service
session, and the fork check made there.

What this is: the service app under uvicorn on a loopback port (in this process, so the sandboxes it starts
are this process's and can be counted, `_serving`) and `EnvClient` over HTTP, each turn's text parsed by the
runner's own parser. Episodes are played one after the other, in groups on the same task and seed, as
training plays them (`play_all`); each fills an `EpisodeTrace` (state keys, observation sizes, step
latencies, plain-text turns and whether the env flagged them, malformed context keys, how it ended). A task
the env refuses at reset (`InvalidTask`) is the task's fault: its trace says so and holds nothing else. The
fork check (`_fork_finding`) forks a session after the policy's first turn and plays both on with the same
turns: their step results must agree, and an env that cannot fork must answer 409. The service's own count
of the sessions left open comes from its /healthz.

What this is not: a load test (episodes run one after the other, so latencies are those of one session;
`bench/service.py` measures throughput), or the findings read from the traces (`service_check_findings.py`).
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Hashable, Iterator, Mapping, Sequence
from typing import Any

from agentrl.devtools.service_check_types import CheckConfig, EpisodeTrace, Finding
from agentrl.env.checker import check_context_info
from agentrl.env.core import INFO_CONTEXT_RESET, INFO_INVALID, INFO_STATE_KEY, INFO_SUCCESS
from agentrl.env.scripted import ScriptedPolicy, ScriptedTurns
from agentrl.errors import AgentRLError, EnvError, InvalidTask, ServiceUnavailable


async def play_all(
    env_id: str,
    tasks: Sequence[Mapping[str, Any]],
    kwargs: Mapping[str, Any],
    policy: ScriptedPolicy,
    config: CheckConfig,
    containers: Callable[[], set[str] | None] | None,
) -> tuple[list[EpisodeTrace], int, set[str], Finding]:
    """Every episode, one after the other, through a service in this process; the sessions left open at the
    end, the sandbox containers seen while it ran (`containers()` after each episode; None: no Docker, none
    seen), and the fork check's finding."""
    from agentrl.client import EnvClient

    seen: set[str] = set()
    with _serving(env_id, kwargs) as url:
        async with EnvClient(url) as client:
            traces = []
            for index in range(config.episodes):
                group = index // config.group_size
                task = tasks[group % len(tasks)]
                turns = ScriptedTurns(policy, task, kwargs)
                trace = await _play(client, env_id, task, config.seed + group, turns, config, group)
                traces.append(trace)
                seen |= (containers() or set()) if containers is not None else set()
            accepted = [tasks[trace.group % len(tasks)] for trace in traces if trace.refused is None]
            fork = Finding("warn", "fork", "not checked: the env refused every task")
            if accepted:
                turns = ScriptedTurns(policy, accepted[0], kwargs)
                fork = await _fork_finding(client, env_id, accepted[0], turns, config)
        open_sessions = await _open_sessions(url)
    return traces, open_sessions, seen, fork


async def _play(
    client: Any,
    env_id: str,
    task: Mapping[str, Any],
    seed: int,
    turns: ScriptedTurns,
    config: CheckConfig,
    group: int,
) -> EpisodeTrace:
    from agentrl.agent.parsing import parse_turn

    trace = EpisodeTrace(group=group)
    try:
        start = await client.create_session(env_id, task, seed)
    except InvalidTask as exc:
        trace.refused = str(exc)
        return trace
    except AgentRLError as exc:
        trace.error = f"create_session: {type(exc).__name__}: {exc}"
        return trace
    trace.reset_key_present = INFO_STATE_KEY in start.info
    trace.reset_key = _hashable(start.info.get(INFO_STATE_KEY))
    trace.observation_chars.append(len(start.observation))
    observation = start.observation
    try:
        for _ in range(config.max_turns):
            text = turns.next_turn(observation)
            if text is None:
                break  # the policy's plan ended before the episode did
            action = parse_turn(text)
            started = time.perf_counter()
            result = await client.step(start.session_id, action)
            trace.latencies_s.append(time.perf_counter() - started)
            _record(trace, action, result)
            observation = result.observation
            if result.terminated or result.truncated:
                trace.ended = True
                trace.success = result.info.get(INFO_SUCCESS) is True
                break
    except AgentRLError as exc:
        trace.error = f"step: {type(exc).__name__}: {exc}"
    finally:
        try:
            await client.close_session(start.session_id)
        except AgentRLError as exc:
            trace.error = trace.error or f"close_session: {type(exc).__name__}: {exc}"
    return trace


async def _fork_finding(
    client: Any, env_id: str, task: Mapping[str, Any], turns: ScriptedTurns, config: CheckConfig
) -> Finding:
    """Through the service: after the policy's first turn, fork the session, then play the policy's next
    turns on both; every step result (observation, reward, flags, state key) must agree."""
    from agentrl.agent.parsing import parse_turn
    from agentrl.errors import ForkUnsupported

    opened: list[str] = []
    try:
        start = await client.create_session(env_id, task, config.seed)
        opened.append(start.session_id)
        observation, compared = start.observation, 0
        for turn in range(config.max_turns):
            text = turns.next_turn(observation)
            if text is None:
                break
            action = parse_turn(text)
            if turn == 0:
                result = await client.step(start.session_id, action)
                if result.terminated or result.truncated:
                    break
                (fork,) = await client.fork_session(start.session_id, 1)
                opened.append(fork.session_id)
            else:
                result = await client.step(start.session_id, action)
                forked = await client.step(fork.session_id, action)
                if _step_view(result) != _step_view(forked):
                    got, expected = repr(_step_view(forked))[:200], repr(_step_view(result))[:200]
                    return Finding(
                        "FAIL", "fork", f"turn {turn}: the fork gave {got}, the original {expected}"
                    )
                compared += 1
                if result.terminated or result.truncated:
                    break
            observation = result.observation
    except ForkUnsupported:
        return Finding(
            "ok", "fork", "the env does not fork (fork_capability 'none'); tree rollouts refuse it"
        )
    except AgentRLError as exc:
        return Finding("FAIL", "fork", f"{type(exc).__name__}: {exc}")
    finally:
        for session_id in opened:
            with contextlib.suppress(AgentRLError):
                await client.close_session(session_id)
    if not compared:
        return Finding("warn", "fork", "no turn after a fork was compared (the episode ended at once)")
    return Finding("ok", "fork", f"a fork over the service stepped like its original for {compared} turns")


def _step_view(result: Any) -> tuple[Any, ...]:
    key = _hashable(result.info.get(INFO_STATE_KEY))
    return result.observation, float(result.reward), result.terminated, result.truncated, key


def _record(trace: EpisodeTrace, action: Any, result: Any) -> None:
    info = result.info
    if INFO_STATE_KEY in info:
        trace.keys.append(_hashable(info[INFO_STATE_KEY]))
    else:
        trace.keys_missing += 1
    trace.observation_chars.append(len(result.observation))
    trace.episode_return += float(result.reward)
    try:
        check_context_info(info, f"step {len(trace.latencies_s)}")
    except EnvError as exc:
        trace.context_errors.append(str(exc))
    trace.context_resets += info.get(INFO_CONTEXT_RESET) is True
    if not action.tool_calls:
        trace.plain_turns += 1
        trace.plain_flagged += info.get(INFO_INVALID) is True
        trace.plain_unflagged += info.get(INFO_INVALID) is False


def _hashable(key: Any) -> Hashable:
    """A state key as it arrives over JSON (a tuple becomes a list): made hashable again for counting."""
    if isinstance(key, list):
        return tuple(_hashable(item) for item in key)
    if isinstance(key, dict):
        return tuple(sorted((str(k), _hashable(v)) for k, v in key.items()))
    return key


async def _open_sessions(url: str) -> int:
    """The service's own count of live sessions (its /healthz says it)."""
    import httpx

    async with httpx.AsyncClient(base_url=url, trust_env=False) as http:
        response = await http.get("/healthz")
    return int(response.json().get("sessions", 0))


@contextlib.contextmanager
def _serving(env_id: str, kwargs: Mapping[str, Any]) -> Iterator[str]:
    """The env service app under uvicorn on a free loopback port, in a thread of this process."""
    import uvicorn

    from agentrl.service import ServiceSettings, create_app
    from agentrl.service.embedded import LOOPBACK, free_loopback_port

    settings = ServiceSettings(env_kwargs={env_id: dict(kwargs)} if kwargs else {})
    port = free_loopback_port()
    server = uvicorn.Server(uvicorn.Config(create_app(settings), host=LOOPBACK, port=port, log_level="error"))
    thread = threading.Thread(target=server.run, name="envs-check-service", daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise ServiceUnavailable("the env service of `agentrl envs check` did not start within 30 s")
        time.sleep(0.01)
    try:
        yield f"http://{LOOPBACK}:{port}"
    finally:
        server.should_exit = True  # its shutdown closes the sessions and the envs' warm sandbox pools
        thread.join(timeout=60)
