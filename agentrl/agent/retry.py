"""Re-run episodes that ended in an infrastructure failure, a bounded number of times.

What this is: `play_with_retries(play, config)`, which awaits `play()` (one episode: a closure over the task,
seed and group id, e.g. around `rollout.run_episode`) and, while the episode ended with
`stop_reason="infra_error"` (a replica or sandbox died under it), waits `backoff_s` and plays it again, at
most `max_attempts` times in all. A re-run opens a new session, so it lands on a live replica: the load
balancer no longer routes to a dead one, and `agentrl.client.EnvClient` tries the replicas it saw failing
last. The result keeps the failed attempts apart from the episode that counts, so a caller stores and
trains on exactly one episode per slot and can still count the re-runs.

What this is not: a retry of single requests (that is `agentrl.client`), or a way to hide a real failure:
an episode still failing after `max_attempts` is returned as it ended, marked `infra_error`, and must not be
trained on. Episodes that ended for any other reason (solved, wrong answer, out of turns) are never re-run,
and an error `play()` raises (a request the service rejected, such as a wrong token or a task the env
refuses; a bug) propagates at once: no re-play could fix it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

from agentrl.errors import ConfigError
from agentrl.types import Episode


@dataclass(frozen=True)
class RetryConfig:
    """How often an infrastructure failure is re-run.

    max_attempts: plays per episode, the first included (1 disables re-runs)
    backoff_s:    wait before each re-run, so health checks can take a dead replica out of rotation
    """

    max_attempts: int = 3
    backoff_s: float = 0.5

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise ConfigError(f"retry.max_attempts must be at least 1, got {self.max_attempts}")
        if self.backoff_s < 0:
            raise ConfigError(f"retry.backoff_s must be non-negative, got {self.backoff_s}")


@dataclass(frozen=True)
class RetriedEpisode:
    """The episode that counts (the last attempt) and the attempts before it, which all ended in
    `infra_error`. `episode.stop_reason == "infra_error"` only when every attempt failed."""

    episode: Episode
    failed_attempts: tuple[Episode, ...] = ()

    @property
    def attempts(self) -> int:
        return len(self.failed_attempts) + 1


def needs_rerun(episode: Episode) -> bool:
    """Only infrastructure failures are re-run; every other ending is the policy's own result."""
    return episode.stop_reason == "infra_error"


async def play_with_retries(play: Callable[[], Awaitable[Episode]], config: RetryConfig) -> RetriedEpisode:
    """Play an episode, re-playing it while it ends in `infra_error`, at most `config.max_attempts` times."""
    failed: list[Episode] = []
    episode = await play()
    while needs_rerun(episode) and len(failed) + 1 < config.max_attempts:
        failed.append(episode)
        await asyncio.sleep(config.backoff_s)
        episode = await play()
    return RetriedEpisode(episode, tuple(failed))


def infra_retry_counts(results: Sequence[RetriedEpisode]) -> dict[str, int]:
    """Counts for metrics and reports: episodes, re-runs, and episodes that failed every attempt."""
    return {
        "episodes": len(results),
        "reruns": sum(len(result.failed_attempts) for result in results),
        "rerun_episodes": sum(1 for result in results if result.failed_attempts),
        "infra_failed": sum(1 for result in results if needs_rerun(result.episode)),
    }
