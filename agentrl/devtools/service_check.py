"""`agentrl envs check ID`: an env through the same path training takes, judged, and a short report.

What this is: `check_service_env` runs `check_env` on a local instance, then plays episodes of a random or
scripted policy through a real env service session: the service app under uvicorn on a loopback port (in
this process, so the sandboxes it starts are this process's and can be counted) and `EnvClient` over HTTP,
each turn's text parsed by the runner's own parser. Episodes are played in groups on the same task and
seed, as training plays them. It measures what a plugin author can act on (`Finding`s, each "ok", "warn" or
"FAIL"): sessions that error or stay open, state keys missing, None, or never recurring across a group,
invalid turns and whether the env flags them, steps whose optional context keys are malformed (and how many
steps set `info["context_reset"]`, when any does), observation sizes, step latency p50/p99 (and a
non-blocking env slow enough to stall the service's event loop), episodes the env never ends, a scripted
policy that never succeeds, and sandbox containers started and left behind. A task the env refuses at reset
is the task's fault, not the env's: it is reported once, on the "tasks" line (the task's file and line, the
env's message), and its episodes are left out of every other finding. `format_report` prints it; the exit code
(`CheckReport.exit_code`) is for CI.

The policies are `ScriptedPolicy`s (`agentrl.env.scripted`, the contract `agentrl demos` plays too), each
episode driven by `ScriptedTurns`: "random" picks a tool and fills its arguments from the tool's JSON schema
with small values drawn from a short list (so that the episodes of a group can meet in the same states),
and one turn in five is plain text without a tool call; or a scripted policy (the env class's
`scripted_policy`, or one the caller names). Forks are checked twice: by `check_env` locally, and once
through the service, where the session is forked after the policy's first turn and both are played on
with the same turns (their step results must agree; an env that cannot fork must answer 409).

What this is not: a load test (episodes run one after the other, so latencies are those of one session;
`bench/service.py` measures throughput), or part of the Env API (`agentrl.env` does not import this module;
it needs the service and the client, which sit above the env layer).
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Generator, Hashable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from agentrl.env.checker import check_context_info, check_env
from agentrl.env.core import INFO_CONTEXT_RESET, INFO_INVALID, INFO_STATE_KEY, INFO_SUCCESS
from agentrl.env.registration import make, tools_of
from agentrl.env.scripted import ScriptedPolicy, ScriptedTurn, ScriptedTurns
from agentrl.env.toolcall import render_tool_call
from agentrl.errors import (
    AgentRLError,
    ConfigError,
    EnvError,
    InvalidTask,
    SandboxUnavailable,
    ServiceUnavailable,
)

Status = Literal["ok", "warn", "FAIL"]

RANDOM_STRINGS = ("1", "yes", "hello", "ls", "cat notes.txt", "42")  # few, so group members can agree
RANDOM_INTEGERS = (0, 1, 2, 3, 4, 5, 8, 10, 16, 32)
PLAIN_TEXT_TURN = "I am not sure what to do."
PLAIN_TEXT_EVERY = 5  # the random policy's chance of a turn without a tool call is one in this


@dataclass(frozen=True)
class CheckConfig:
    """How many episodes, how long, and the thresholds of the warnings.

    episodes:      episodes played through the service, in groups of `group_size` on one task and seed
    max_turns:     turns before an episode is cut (the runner's `rollout.max_turns`)
    slow_step_ms:  a non-blocking env (`blocking = False`) whose step p99 is above this gets a warning: its
                   steps run on the service's event loop and stall every other session
    large_observation_chars: an observation longer than this gets a warning (it fills the context)
    teardown_s:    how long to wait for the sandboxes to be removed after the service stopped
    """

    episodes: int = 8
    group_size: int = 2
    max_turns: int = 10
    seed: int = 0
    slow_step_ms: float = 50.0
    large_observation_chars: int = 8000
    teardown_s: float = 20.0

    def __post_init__(self) -> None:
        if self.episodes < 1 or self.group_size < 1 or self.max_turns < 1:
            raise ValueError("episodes, group_size and max_turns must be at least 1")


@dataclass(frozen=True)
class Finding:
    """One line of the report."""

    status: Status
    topic: str
    message: str


@dataclass
class EpisodeTrace:
    """What one episode through the service showed."""

    group: int
    reset_key: Any = None
    reset_key_present: bool = False
    keys: list[Any] = field(default_factory=list)
    keys_missing: int = 0
    observation_chars: list[int] = field(default_factory=list)
    latencies_s: list[float] = field(default_factory=list)
    plain_turns: int = 0  # turns sent without a parseable tool call
    plain_flagged: int = 0  # of those, how many the env flagged info["invalid"] = True
    plain_unflagged: int = 0  # of those, how many it said were valid (info["invalid"] = False)
    context_resets: int = 0  # steps that set info["context_reset"] = True
    context_errors: list[str] = field(default_factory=list)  # malformed context_reset / state_text, per step
    ended: bool = False
    success: bool = False
    episode_return: float = 0.0
    error: str | None = None
    refused: str | None = None  # the env refused the task at reset (InvalidTask): the task's fault


@dataclass
class CheckReport:
    """The findings of one check, with what was checked."""

    env_id: str
    header: str
    findings: list[Finding]

    @property
    def failures(self) -> int:
        return sum(finding.status == "FAIL" for finding in self.findings)

    @property
    def warnings(self) -> int:
        return sum(finding.status == "warn" for finding in self.findings)

    def exit_code(self, strict: bool = False) -> int:
        """0 when nothing failed (and, with `strict`, nothing warned), else 1."""
        return 1 if self.failures or (strict and self.warnings) else 0


def check_service_env(
    env_id: str,
    tasks: Sequence[Mapping[str, Any]],
    *,
    env_kwargs: Mapping[str, Any] | None = None,
    policy: ScriptedPolicy | None = None,
    config: CheckConfig = CheckConfig(),
    header: str = "",
) -> CheckReport:
    """Check `env_id` locally (`check_env`) and through a real service session; see the module docstring.
    `policy` None is the random policy."""
    if not tasks:
        raise ConfigError(
            f"no tasks to check {env_id} on; give a task suite (--suite) or a run config (--task)"
        )
    kwargs = dict(env_kwargs or {})
    before = _own_containers()
    choose = policy or random_policy(tools_of(env_id), config.seed)
    docker = before is not None
    traces, open_sessions, seen, fork = asyncio.run(_play_all(env_id, tasks, kwargs, choose, config, docker))
    played = [trace for trace in traces if trace.refused is None]
    accepted = [tasks[trace.group % len(tasks)] for trace in played]  # check_env on a task the env takes
    findings, blocking = _local_check(env_id, accepted[0] if accepted else None, kwargs)
    findings += task_findings(traces)
    findings += episode_findings(traces, open_sessions, scripted=policy is not None)
    findings.append(fork)
    findings += state_key_findings(played)
    findings += context_findings(played)
    findings += size_and_latency_findings(played, blocking, config)
    findings.append(container_finding(before, seen, config.teardown_s))
    return CheckReport(env_id, header or env_id, findings)


def format_report(report: CheckReport) -> str:
    """The report as the lines `agentrl envs check` prints."""
    lines = [f"envs check {report.header}"]
    lines += [f"  {f.status:5s} {f.topic}: {f.message}" for f in report.findings]
    verdict = "FAIL" if report.failures else "PASS"
    lines.append(f"result: {verdict} ({report.failures} failures, {report.warnings} warnings)")
    return "\n".join(lines)


# --- policies ------------------------------------------------------------------------------------------


def random_policy(tools: Sequence[Mapping[str, Any]], seed: int) -> ScriptedPolicy:
    """A policy of random tool calls with arguments from each tool's schema, and some plain-text turns; one
    generator of draws shared by all its episodes."""
    rng = np.random.default_rng(seed)

    def turns(
        task: Mapping[str, Any], observation: str, env_kwargs: Mapping[str, Any]
    ) -> Generator[ScriptedTurn, str, None]:
        while True:
            yield random_turn(tools, rng)

    return turns


def random_turn(tools: Sequence[Mapping[str, Any]], rng: np.random.Generator) -> str:
    """One random assistant turn: a call of a random tool, or (one in PLAIN_TEXT_EVERY) plain text."""
    if not tools or rng.integers(PLAIN_TEXT_EVERY) == 0:
        return PLAIN_TEXT_TURN
    function = tools[int(rng.integers(len(tools)))]["function"]
    properties = (function.get("parameters") or {}).get("properties") or {}
    arguments = {name: random_value(schema, rng) for name, schema in properties.items()}
    return render_tool_call(function["name"], arguments)


def random_value(schema: Mapping[str, Any], rng: np.random.Generator) -> Any:
    """A small value of the JSON schema's type (an enum's member when there is one)."""
    if schema.get("enum"):
        return _pick(list(schema["enum"]), rng)
    kind = schema.get("type")
    if kind == "integer":
        return int(_pick(list(RANDOM_INTEGERS), rng))
    if kind == "number":
        return float(_pick(list(RANDOM_INTEGERS), rng))
    if kind == "boolean":
        return bool(rng.integers(2))
    if kind == "array":
        return []
    if kind == "object":
        return {}
    return str(_pick(list(RANDOM_STRINGS), rng))


def _pick(values: list[Any], rng: np.random.Generator) -> Any:
    return values[int(rng.integers(len(values)))]


# --- the local part ------------------------------------------------------------------------------------


def _local_check(
    env_id: str, task: Mapping[str, Any] | None, kwargs: Mapping[str, Any]
) -> tuple[list[Finding], bool]:
    env = make(env_id, **kwargs)
    if task is None:
        env.close()
        skipped = Finding("warn", "check_env", "not run: the env refused every task it was given (see tasks)")
        return [skipped], bool(getattr(env, "blocking", True))
    try:
        check_env(env, options={"task": dict(task)})
        finding = Finding(
            "ok", "check_env", "the Env contract holds (Gymnasium's checker, tools, examples, state keys)"
        )
    except Exception as exc:  # noqa: BLE001 - any failure of the contract is the finding
        finding = Finding("FAIL", "check_env", f"{type(exc).__name__}: {exc}")
    finally:
        env.close()
    return [finding], bool(getattr(env, "blocking", True))


# --- episodes through the service ----------------------------------------------------------------------


async def _play_all(
    env_id: str,
    tasks: Sequence[Mapping[str, Any]],
    kwargs: Mapping[str, Any],
    policy: ScriptedPolicy,
    config: CheckConfig,
    docker: bool,
) -> tuple[list[EpisodeTrace], int, set[str], Finding]:
    """Every episode, one after the other, through a service in this process; the sessions left open at the
    end, (with `docker`) the sandbox containers seen while it ran, and the fork check's finding."""
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
                seen |= (_own_containers() or set()) if docker else set()
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


# --- findings (pure) -----------------------------------------------------------------------------------


def task_findings(traces: Sequence[EpisodeTrace]) -> list[Finding]:
    """The tasks the env refused at reset, as the tasks' fault: each distinct refusal once (its message
    names the task's file and line and the env's reason). No line when every task was accepted."""
    refusals = list(dict.fromkeys(trace.refused for trace in traces if trace.refused))
    if not refusals:
        return []
    count = sum(trace.refused is not None for trace in traces)
    return [
        Finding(
            "FAIL",
            "tasks",
            f"{count} of {len(traces)} episodes could not start: the env refused their task at reset "
            "(a bad task, not a broken env): " + " | ".join(refusals),
        )
    ]


def episode_findings(traces: Sequence[EpisodeTrace], open_sessions: int, *, scripted: bool) -> list[Finding]:
    """Sessions (errors, refused tasks, left open), how episodes ended, success, and invalid turns; the
    episodes of refused tasks count only on the sessions line."""
    errors = [trace.error for trace in traces if trace.error]
    refused = sum(trace.refused is not None for trace in traces)
    findings = [
        Finding(
            "FAIL" if errors or open_sessions else "ok",
            "sessions",
            f"{len(traces) - refused} opened, stepped and closed through the env service; "
            f"{len(errors)} errors"
            + (f" (first: {errors[0]})" if errors else "")
            + (f"; {refused} refused (the task's fault: see tasks)" if refused else "")
            + f"; {open_sessions} left open"
            + (" (close must end the session)" if open_sessions else ""),
        )
    ]
    traces = [trace for trace in traces if trace.refused is None]
    if not traces:
        return findings
    ended = sum(trace.ended for trace in traces)
    successes = sum(trace.success for trace in traces)
    mean_return = float(np.mean([trace.episode_return for trace in traces])) if traces else 0.0
    findings.append(
        Finding(
            "ok" if ended else "warn",
            "episodes",
            f"{ended} of {len(traces)} ended by the env (terminated or truncated), mean return "
            f"{mean_return:.3f}, success {successes}/{len(traces)}"
            + ("" if ended else "; end episodes yourself: terminated when solved, truncated after a budget"),
        )
    )
    if scripted and not successes:
        findings.append(
            Finding(
                "FAIL",
                "success",
                'the scripted policy never reached info["success"] = True on the last step; set it when '
                "the episode is solved (the runner reads success from the last step's info)",
            )
        )
    findings.append(_invalid_finding(traces))
    return findings


def _invalid_finding(traces: Sequence[EpisodeTrace]) -> Finding:
    plain = sum(trace.plain_turns for trace in traces)
    flagged = sum(trace.plain_flagged for trace in traces)
    unflagged = sum(trace.plain_unflagged for trace in traces)
    if not plain:
        return Finding("ok", "invalid turns", "none sent (the policy always called a tool)")
    message = f'{plain} sent without a tool call, {flagged} flagged info["invalid"] by the env'
    if unflagged:
        message += f'; {unflagged} called valid (info["invalid"] = False): right only for envs that read text'
    elif flagged < plain:
        message += f"; {plain - flagged} left to the runner (no parseable tool call counts as invalid)"
    return Finding("ok", "invalid turns", message)


def state_key_findings(traces: Sequence[EpisodeTrace]) -> list[Finding]:
    """Presence of state keys after every reset and step, and how often they recur within a group."""
    steps = sum(len(trace.keys) + trace.keys_missing for trace in traces)
    missing = sum(trace.keys_missing for trace in traces) + sum(not t.reset_key_present for t in traces)
    if missing:
        return [
            Finding(
                "FAIL",
                "state keys",
                f'info["state_key"] missing after {missing} of {steps + len(traces)} resets and steps; '
                "set it on every reset and step (None when the env cannot tell)",
            )
        ]
    keys = [key for trace in traces for key in trace.keys]
    if keys and all(key is None for key in keys):
        return [
            Finding(
                "warn",
                "state keys",
                'info["state_key"] is None on every step: step-level credit (gigpo, hgpo, salt) has no '
                "states to compare and falls back to episode-level credit",
            )
        ]
    rate = recurrence_rate(traces)
    if rate == 0.0 and steps:
        return [
            Finding(
                "warn",
                "state keys",
                "present, but no step reached a state another episode of its group reached: a key of the "
                "history (a step counter, past actions) never recurs; key the state itself (or this "
                "policy never met itself: try --episodes with a larger --group-size)",
            )
        ]
    return [
        Finding(
            "ok",
            "state keys",
            f"present after every reset and step; {rate:.0%} of steps reach a state another episode of "
            "their group reached",
        )
    ]


def context_findings(traces: Sequence[EpisodeTrace]) -> list[Finding]:
    """Steps whose `info["context_reset"]` is not a bool or whose `info["state_text"]` is not a short str
    (FAIL, with the first); else, only when some step set it, how many steps set `info["context_reset"]`."""
    errors = [error for trace in traces for error in trace.context_errors]
    if errors:
        return [
            Finding(
                "FAIL",
                "context boundaries",
                f"{len(errors)} steps with a malformed optional context key (first: {errors[0]})",
            )
        ]
    resets = sum(trace.context_resets for trace in traces)
    if not resets:
        return []
    return [
        Finding(
            "ok",
            "context boundaries",
            f'{resets} steps set info["context_reset"] (rollout.context.policy=window starts a fresh window '
            "after each)",
        )
    ]


def recurrence_rate(traces: Sequence[EpisodeTrace]) -> float:
    """The fraction of steps (not None-keyed) whose state key another episode of the same group also had,
    at its reset or any step."""
    groups: dict[int, list[EpisodeTrace]] = {}
    for trace in traces:
        groups.setdefault(trace.group, []).append(trace)
    hits = total = 0
    for members in groups.values():
        states = [{trace.reset_key, *trace.keys} - {None} for trace in members]
        for index, trace in enumerate(members):
            others = set().union(*(s for j, s in enumerate(states) if j != index))
            for key in trace.keys:
                if key is not None:
                    total += 1
                    hits += key in others
    return hits / total if total else 0.0


def size_and_latency_findings(
    traces: Sequence[EpisodeTrace], blocking: bool, config: CheckConfig
) -> list[Finding]:
    """Observation sizes, and step latency with the blocking advice."""
    sizes = [size for trace in traces for size in trace.observation_chars]
    latencies_ms = [1000 * s for trace in traces for s in trace.latencies_s]
    findings = []
    if sizes:
        largest = max(sizes)
        findings.append(
            Finding(
                "warn" if largest > config.large_observation_chars else "ok",
                "observations",
                f"mean {np.mean(sizes):.0f} chars, max {largest}"
                + (
                    f"; above {config.large_observation_chars} chars an observation crowds the context: "
                    "truncate it (keep the head and the tail)"
                    if largest > config.large_observation_chars
                    else ""
                ),
            )
        )
    if latencies_ms:
        p50, p99 = (float(np.percentile(latencies_ms, q)) for q in (50, 99))
        slow = not blocking and p99 > config.slow_step_ms
        kind = "blocking env: steps run in worker threads" if blocking else "non-blocking env"
        findings.append(
            Finding(
                "warn" if slow else "ok",
                "step latency",
                f"p50 {p50:.1f} ms, p99 {p99:.1f} ms over {len(latencies_ms)} steps ({kind})"
                + (
                    "; a non-blocking step this slow stalls the service's event loop: set blocking = True"
                    if slow
                    else ""
                ),
            )
        )
    return findings


def container_finding(before: set[str] | None, seen: set[str], teardown_s: float) -> Finding:
    """Sandbox containers this process started during the check, and whether any outlived it."""
    if before is None:
        return Finding("ok", "containers", "not checked (no Docker engine answers)")
    deadline = time.monotonic() + teardown_s
    left = (_own_containers() or set()) - before
    while left and time.monotonic() < deadline:
        time.sleep(0.5)
        left = (_own_containers() or set()) - before
    started = len((seen - before) | left)
    if left:
        return Finding(
            "FAIL",
            "containers",
            f"{len(left)} sandbox container(s) left {teardown_s:g} s after the service stopped "
            f"({', '.join(sorted(c[:12] for c in left))}): release the sandbox on reset and in close()",
        )
    what = f"{started} sandbox container(s) started, all removed" if started else "no sandbox started"
    return Finding("ok", "containers", what)


def _own_containers() -> set[str] | None:
    """Ids of the sandbox containers this process started that still exist; None without Docker."""
    from agentrl.sandbox.docker import OWNER_LABEL, labelled_containers, owner

    try:
        return {entry["Id"] for entry in labelled_containers({OWNER_LABEL: owner()})}
    except SandboxUnavailable:
        return None
