"""Re-running infrastructure failures: bounded, only for infra_error, failed attempts kept apart."""

from __future__ import annotations

import asyncio

import pytest

from agentrl.agent.retry import RetryConfig, infra_retry_counts, play_with_retries
from agentrl.errors import ConfigError
from agentrl.types import Episode, StopReason


def episode(stop: StopReason) -> Episode:
    return Episode("e", "env", "t", "g", 0, (), stop, error="lost" if stop == "infra_error" else None)


def scripted(*stops: StopReason) -> tuple[list[int], object]:
    calls: list[int] = []

    async def play() -> Episode:
        calls.append(1)
        return episode(stops[len(calls) - 1])

    return calls, play


def test_an_infra_failure_is_re_run_until_it_completes() -> None:
    calls, play = scripted("infra_error", "infra_error", "terminated")
    result = asyncio.run(play_with_retries(play, RetryConfig(max_attempts=3, backoff_s=0)))  # type: ignore[arg-type]
    assert len(calls) == 3 and result.attempts == 3 and result.episode.stop_reason == "terminated"
    assert all(e.stop_reason == "infra_error" for e in result.failed_attempts)


def test_attempts_are_bounded_and_the_last_failure_is_returned_as_such() -> None:
    calls, play = scripted("infra_error", "infra_error", "terminated")
    result = asyncio.run(play_with_retries(play, RetryConfig(max_attempts=2, backoff_s=0)))  # type: ignore[arg-type]
    assert len(calls) == 2 and result.episode.stop_reason == "infra_error"
    assert infra_retry_counts([result]) == {
        "episodes": 1,
        "reruns": 1,
        "rerun_episodes": 1,
        "infra_failed": 1,
    }


@pytest.mark.parametrize("stop", ["terminated", "truncated", "max_turns", "max_tokens"])
def test_the_policy_s_own_endings_are_never_re_run(stop: StopReason) -> None:
    calls, play = scripted(stop, "terminated")
    result = asyncio.run(play_with_retries(play, RetryConfig(backoff_s=0)))  # type: ignore[arg-type]
    assert len(calls) == 1 and result.attempts == 1 and result.episode.stop_reason == stop


def test_bad_retry_settings_are_config_errors() -> None:
    with pytest.raises(ConfigError, match="max_attempts"):
        RetryConfig(max_attempts=0)
