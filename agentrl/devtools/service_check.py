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
episode driven by `ScriptedTurns`: "random" (`random_policy`), or a scripted policy (the env class's
`scripted_policy`, or one the caller names). Forks are checked twice: by `check_env` locally, and once
through the service, where the session is forked after the policy's first turn and both are played on
with the same turns (their step results must agree; an env that cannot fork must answer 409).

This module is the driver, with the two checks around the service's episodes: `check_env` on a local
instance before them, and the sandbox containers this process started, counted before, during and after
(`container_finding`). The parts, re-exported here where callers read them:
- the config, the episode trace and a report line: agentrl/devtools/service_check_types.py;
- the report, its verdict and its lines: agentrl/devtools/service_check_report.py (`format_report`);
- the random policy: agentrl/devtools/service_check_policy.py;
- the episodes and the fork check through the service: agentrl/devtools/service_check_play.py;
- the findings read from the episodes' traces (pure): agentrl/devtools/service_check_findings.py.

What this is not: a load test (episodes run one after the other, so latencies are those of one session;
`bench/service.py` measures throughput), or part of the Env API (`agentrl.env` does not import this module;
it needs the service and the client, which sit above the env layer).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping, Sequence
from typing import Any

from agentrl.devtools.service_check_findings import (
    context_findings,
    episode_findings,
    recurrence_rate,
    size_and_latency_findings,
    state_key_findings,
    task_findings,
)
from agentrl.devtools.service_check_play import play_all
from agentrl.devtools.service_check_policy import random_policy, random_turn
from agentrl.devtools.service_check_report import CheckReport, format_report
from agentrl.devtools.service_check_types import CheckConfig, EpisodeTrace, Finding
from agentrl.env.checker import check_env
from agentrl.env.registration import make, tools_of
from agentrl.env.scripted import ScriptedPolicy
from agentrl.errors import ConfigError, SandboxUnavailable

__all__ = [
    "CheckConfig",
    "CheckReport",
    "EpisodeTrace",
    "Finding",
    "check_service_env",
    "container_finding",
    "context_findings",
    "format_report",
    "random_turn",
    "recurrence_rate",
]

DEFAULT_CONFIG = CheckConfig()


def check_service_env(
    env_id: str,
    tasks: Sequence[Mapping[str, Any]],
    *,
    env_kwargs: Mapping[str, Any] | None = None,
    policy: ScriptedPolicy | None = None,
    config: CheckConfig = DEFAULT_CONFIG,
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
    containers = _own_containers if before is not None else None
    traces, open_sessions, seen, fork = asyncio.run(
        play_all(env_id, tasks, kwargs, choose, config, containers)
    )
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
