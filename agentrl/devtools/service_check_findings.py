"""The findings of `agentrl envs check` (`agentrl/devtools/service_check.py`) read from the episodes' traces,
pure.

What this is: one function per family of report lines, each from the `EpisodeTrace`s of the episodes played
through the service: the tasks the env refused at reset (the task's fault, reported once, its episodes left
out of every other finding), sessions that error or stay open, how episodes ended, a scripted policy that
never succeeds, invalid turns and whether the env flags them, state keys missing, None, or never recurring
across a group (`recurrence_rate`), steps whose optional context keys are malformed (and how many set
`info["context_reset"]`, when any does), observation sizes, and step latency p50/p99 (with a non-blocking
env slow enough to stall the service's event loop).

What this is not: the findings that need the world around the check: `check_env` on a local instance and
the sandbox containers left behind (`service_check.py`), or the fork check made through the service
(`service_check_play.py`).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from agentrl.devtools.service_check_types import CheckConfig, EpisodeTrace, Finding


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
