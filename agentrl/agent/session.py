"""What every episode player shares: the env session's lifecycle, the player contract, the `Episode` builder.

What this is:
- `SessionClient`, the env service as a player sees it (`agentrl.client.EnvClient` implements it), and
  `ForkingClient`, one that can also fork a session (tree rollouts);
- `EpisodeSession`, the one session context manager: `open` resets the env; leaving the block always closes
  the session (also on failure or cancellation) and turns an infrastructure failure
  (`agentrl.errors.INFRA_ERRORS`: a lost sandbox, an unavailable service) into data (`infra_error`) instead
  of an exception, so the episode is returned with the turns played so far and re-played by
  `rollout.play_member`. Any other error propagates unchanged: a bug, a model error, or a request the
  service rejected as the caller's mistake (`RequestRejected`), which no re-play can fix;
- `EpisodePlayer`, the signature both players have: the built-in token runner
  (`agentrl.agent.rollout.run_episode`) and the harness endpoint (`agentrl.harness.runner.HarnessPlayer`).
  The trainer picks one (`agentrl.harness.runner.choose_player`) and passes it down;
- `build_episode`, the one place an `Episode` record is assembled.

What this is not: the turn loop (`rollout.run_episode`), the harness's recorder, or the re-play policy
(`agentrl.agent.retry`).
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from types import TracebackType
from typing import Any, Protocol

from agentrl.agent.engines.base import Engine, SamplingParams
from agentrl.agent.rollout_config import RolloutConfig
from agentrl.env.core import StepResult
from agentrl.errors import INFRA_ERRORS, ConfigError
from agentrl.types import Action, Episode, ForkedSession, SessionStart, StopReason, Turn


class SessionClient(Protocol):
    """The env service as a player sees it (implemented by `agentrl.client.EnvClient`)."""

    async def create_session(self, env_id: str, task: Mapping[str, Any], seed: int) -> SessionStart: ...
    async def step(self, session_id: str, action: Action) -> StepResult: ...
    async def close_session(self, session_id: str) -> None: ...


class ForkingClient(SessionClient, Protocol):
    """A `SessionClient` that can also fork a live session (`agentrl.client.EnvClient.fork_session`): n new
    sessions in its state, on its replica. `ForkUnsupported` when the env cannot fork."""

    async def fork_session(self, session_id: str, n: int = 1) -> list[ForkedSession]: ...


class EpisodePlayer(Protocol):
    """Plays one attempt at one episode of `task` and returns it, whatever happened to the infrastructure.

    `seed` is the env's reset seed; with `sampler_seed`, model call t samples with
    `derive_seed(sampler_seed, t)`."""

    async def __call__(
        self,
        client: SessionClient,
        engine: Engine,
        env_id: str,
        task: Mapping[str, Any],
        seed: int,
        group_id: str,
        sampling: SamplingParams,
        config: RolloutConfig,
        sampler_seed: int | None = None,
    ) -> Episode: ...


class EpisodeSession:
    """`async with EpisodeSession(client) as session: start = await session.open(env_id, task, seed)`.

    On leaving the block the session (if one was opened) is closed; an infrastructure failure raised inside
    the block is kept in `infra_error` and not propagated."""

    def __init__(self, client: SessionClient) -> None:
        self.client = client
        self.start: SessionStart | None = None
        self.infra_error: BaseException | None = None

    async def open(self, env_id: str, task: Mapping[str, Any], seed: int) -> SessionStart:
        """Create the session: the env resets and tells its tools, examples and first observation."""
        self.start = await self.client.create_session(env_id, task, seed)
        return self.start

    async def __aenter__(self) -> EpisodeSession:
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> bool:
        infra = isinstance(error, INFRA_ERRORS)
        if infra:
            self.infra_error = error
        if self.start is not None:
            await close_quietly(self.client, self.start.session_id, failing=error is not None and not infra)
        return infra


async def close_quietly(client: SessionClient, session_id: str, failing: bool) -> None:
    """Close a session. An infrastructure failure while closing is ignored (the service's reaper closes the
    session); while another error is propagating (`failing`), every error is, so that the error reported is
    the one that ended the episode."""
    try:
        await client.close_session(session_id)
    except INFRA_ERRORS:
        pass
    except Exception:
        if not failing:
            raise


def build_episode(
    env_id: str,
    task: Mapping[str, Any],
    seed: int,
    group_id: str,
    turns: Sequence[Turn],
    stop_reason: StopReason,
    start: SessionStart | None,
    success: bool,
    error: str | None = None,
) -> Episode:
    """The `Episode` record of one play; an `error` makes it an infrastructure failure (`infra_error`)."""
    return Episode(
        episode_id=uuid.uuid4().hex,
        env_id=env_id,
        task_id=str(task.get("id", "")),
        group_id=group_id,
        seed=seed,
        turns=tuple(turns),
        stop_reason="infra_error" if error is not None else stop_reason,
        initial_state_key=start.info.get("state_key") if start is not None else None,
        success=success,
        error=error,
        first_observation=start.observation if start is not None else None,
    )


def refuse_harness(config: RolloutConfig) -> None:
    """The built-in player with `rollout.harness` set is a wiring mistake: the harness would be ignored."""
    if config.harness.enabled:
        raise ConfigError(
            "rollout.harness is set but the episodes are played by the built-in runner: pass "
            "player=agentrl.harness.runner.choose_player(config.rollout) (the trainer and `agentrl eval` do)"
        )
