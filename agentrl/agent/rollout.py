"""THE episode loop: one agent, one env session, turn after turn, token-in/token-out.

What this is: `run_episode` (read it top to bottom; phases are numbered), the built-in `EpisodePlayer`, and
`collect_rollouts` / `play_member`, which run G episodes per task concurrently so that the engine can batch
their generations, with whichever player they are given (this one, or a harness's:
`agentrl.harness.runner.choose_player`). The session's lifecycle, the player contract and the `Episode`
builder are shared with the harness player (`agentrl/agent/session.py`). The env is reached through a
`SessionClient` (the HTTP client in `agentrl/client.py`, or anything with the same three methods).
Bookkeeping follows `agentrl/types.py`: each turn records only the tokens appended since the previous
completion, so the concatenation of an episode's turns is exactly what the engine saw and sampled.

Expected failures are data: an unparseable turn is sent to the env as a text-only action and recorded as
`invalid`; an infrastructure failure (`agentrl.errors.INFRA_ERRORS`: a sandbox or an unavailable service)
ends the episode with `stop_reason="infra_error"` and the turns so far. Anything else propagates: a bug, a
model error, and a request the service rejected as the caller's mistake (`RequestRejected`: a wrong token, a
task the env refuses), which no re-play can fix.

`collect_rollouts` re-plays an episode that ended in an infrastructure failure (a new session, so a live
replica) up to `RolloutConfig.infra_attempts` times in all (`agentrl.agent.retry`); `Episode.attempts`
says how many plays it took, and one still failing after that is returned as `infra_error`. It runs the
episodes with `run_concurrently`: the first error that propagates cancels the other episodes (which close
their sessions) and is raised as itself, not wrapped in an ExceptionGroup, so the CLI can print it.

Context policies (`rollout.context`, `agentrl/agent/context.py`): with the default `full` every turn is
appended to one growing token context; `window` and `mask` build each turn's prompt from the recorded pieces,
and a prompt that does not extend the last one starts a new token segment (`Walk.segment`, `Turn.segment`).

What this is not: the context policies themselves (`context.py`) or the chat template (`prompting.py`).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import uuid
from collections.abc import Awaitable, Callable, Coroutine, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, TypeVar

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from agentrl.agent.context import (
    ContextState,
    advance,
    continues,
    next_prompt,
    start_state,
    summarised,
    summary_request,
    wants_summary,
)
from agentrl.agent.engines.base import Completion, Engine, SamplingParams
from agentrl.agent.parsing import parse_turn
from agentrl.agent.prompting import EpisodeRenderer, render_observation_delta
from agentrl.agent.retry import RetryConfig, play_with_retries
from agentrl.agent.rollout_config import RolloutConfig
from agentrl.agent.session import (
    EpisodePlayer,
    EpisodeSession,
    SessionClient,
    build_episode,
    refuse_harness,
)
from agentrl.types import SUMMARY_INFO, Action, Episode, SessionStart, StopReason, Turn

T = TypeVar("T")


@dataclass
class Walk:
    """An episode in progress: its env session, every token of its current segment the engine has been fed
    or has sampled so far (`context`), the prompt tokens to append before the next turn (`pending`), its
    turns, and why it stopped (None while it may go on). A tree rollout branches a walk (`branch`) at a
    forked session.

    Under a context policy other than `full` (`rollout.context`), `window` holds the episode's context
    pieces (`agentrl.agent.context.ContextState`, immutable, so a branch shares it), `renderer` renders new
    ones, `view` says what `pending` holds, and `segment` counts the token segments started before the
    current one: a prompt that does not extend `context` starts a new one, `context` then empty.
    `summaries` counts the summary turns among `turns` (no env step: `played_turns`)."""

    session_id: str
    pending: list[int]
    context: list[int] = field(default_factory=list)
    turns: list[Turn] = field(default_factory=list)
    stop_reason: StopReason | None = None
    episode_id: str = field(default_factory=lambda: uuid.uuid4().hex)
    parent_id: str | None = None
    branch_turn: int | None = None
    segment: int = 0
    window: ContextState | None = None
    renderer: EpisodeRenderer | None = None
    view: Mapping[str, Any] | None = None
    summaries: int = 0

    def branch(self, session_id: str) -> Walk:
        """A copy of this walk continuing in `session_id` (a fork of this walk's session), its parent this."""
        return replace(
            self,
            session_id=session_id,
            pending=list(self.pending),
            context=list(self.context),
            turns=list(self.turns),
            episode_id=uuid.uuid4().hex,
            parent_id=self.episode_id,
            branch_turn=len(self.turns),
        )


def first_walk(engine: Engine, start: SessionStart, config: RolloutConfig) -> Walk:
    """The walk of a new episode from its session's start: the first prompt pending, and under a context
    policy other than `full` the pieces it keeps (`agentrl.agent.context`)."""
    renderer = EpisodeRenderer(engine.tokenizer, start.tools, start.examples, config.instructions)
    pending = renderer.first(start.observation)
    if config.context.policy == "full":
        return Walk(start.session_id, pending)
    window = start_state(pending, start.observation)
    view = next_prompt(window, config.context)[1]
    return Walk(start.session_id, pending, window=window, renderer=renderer, view=view)


async def run_episode(
    client: SessionClient,
    engine: Engine,
    env_id: str,
    task: Mapping[str, Any],
    seed: int,
    group_id: str,
    sampling: SamplingParams,
    config: RolloutConfig,
    sampler_seed: int | None = None,
) -> Episode:
    """Play one episode of `task` and return it, whatever happened to the infrastructure (the built-in
    `EpisodePlayer`). With `sampler_seed`, turn t is sampled with seed `derive_seed(sampler_seed, t)`."""
    refuse_harness(config)
    walk: Walk | None = None
    # 1. open a session: the env resets and tells us its tools and few-shot examples; leaving the block
    # always releases the session (and its sandbox) and keeps an infrastructure failure as data
    async with EpisodeSession(client) as session:
        start = await session.open(env_id, task, seed)

        # 2. render the first prompt; later turns append to it (or, under a context policy, may start a
        # new segment: `next_context`)
        walk = first_walk(engine, start, config)

        # 3-6. turn after turn (`take_turn`) until the env ends the episode or a budget runs out
        await play_turns(client, engine, walk, config.max_turns, sampling, config, sampler_seed)

    # 7. the record: an infrastructure failure keeps the turns so far
    error = None if session.infra_error is None else str(session.infra_error)
    return walk_episode(walk, env_id, task, seed, group_id, session.start, error)


async def play_turns(
    client: SessionClient,
    engine: Engine,
    walk: Walk,
    until: int,
    sampling: SamplingParams,
    config: RolloutConfig,
    sampler_seed: int | None,
) -> None:
    """Take turns until `walk` has played `until` env turns (`played_turns`) or has stopped."""
    while walk.stop_reason is None and played_turns(walk) < until:
        await take_turn(client, engine, walk, sampling, config, sampler_seed)


def played_turns(walk: Walk) -> int:
    """The turns of `walk` the env played: all but summary turns (`Turn.is_summary`)."""
    return len(walk.turns) - walk.summaries


async def take_turn(
    client: SessionClient,
    engine: Engine,
    walk: Walk,
    sampling: SamplingParams,
    config: RolloutConfig,
    sampler_seed: int | None,
) -> None:
    """One assistant turn of `walk` (its index is the number of turns so far); sets `walk.stop_reason` when
    the episode ends. An infrastructure failure propagates (the caller's session keeps it as data)."""
    # 3. under the summary policy, a summary turn first when the prompt grew past `summary_at_tokens`;
    # then stop before a turn that might not fit the context budget
    if walk.window is not None and wants_summary(
        walk.window, config.context, len(walk.context) + len(walk.pending), sampling.max_new_tokens
    ):
        await write_summary(engine, walk, sampling, config, sampler_seed)
        if walk.stop_reason is not None:
            return
    if not fits_next_turn(walk, sampling, config):
        walk.stop_reason = "max_tokens"
        return
    # 4. sample the assistant turn from the exact token context
    completion = await sample_turn(engine, walk, sampling, sampler_seed)
    # 5-6. the env answers it
    await play_sampled(client, engine, walk, completion, config)


def fits_next_turn(walk: Walk, sampling: SamplingParams, config: RolloutConfig) -> bool:
    """Whether `walk`'s next turn (its prompt so far plus `max_new_tokens`) fits `max_context_tokens`."""
    return len(walk.context) + len(walk.pending) + sampling.max_new_tokens <= config.max_context_tokens


async def sample_turn(
    engine: Engine, walk: Walk, sampling: SamplingParams, sampler_seed: int | None
) -> Completion:
    """`walk`'s next turn sampled from its exact token context (the tokens so far plus `pending`), the walk
    left as it was: a tree rollout may branch it before the env sees the turn (agentrl/agent/tree.py)."""
    index = len(walk.turns)
    params = sampling if sampler_seed is None else replace(sampling, seed=derive_seed(sampler_seed, index))
    return await engine.generate([*walk.context, *walk.pending], params)


async def play_sampled(
    client: SessionClient, engine: Engine, walk: Walk, completion: Completion, config: RolloutConfig
) -> None:
    """Append `completion`, sampled for `walk`'s next turn, as that turn: the env answers it, the turn is
    recorded and the observation becomes the next prompt (or the episode stops)."""
    index = len(walk.turns)
    walk.context.extend(walk.pending)
    walk.context.extend(completion.token_ids)

    # 5. parse it and let the env answer
    action = parse_turn(completion.text)
    result = await client.step(walk.session_id, action)
    info = dict(result.info)
    walk.turns.append(
        Turn(
            index=index,
            prompt_ids=tuple(walk.pending),
            completion_ids=completion.token_ids,
            completion_logprobs=completion.logprobs,
            text=completion.text,
            action=action,
            observation=result.observation,
            reward=float(result.reward),
            invalid=is_invalid(action, info),
            state_key=info.get("state_key"),
            terminated=bool(result.terminated),
            truncated=bool(result.truncated),
            info=info,
            finish_reason=completion.finish_reason,
            segment=walk.segment,
            prompt_view=walk.view,
        )
    )

    # 6. stop when the env says so or the turn budget is spent, else the observation is the next prompt
    if result.terminated or result.truncated:
        walk.stop_reason = "terminated" if result.terminated else "truncated"
    elif played_turns(walk) >= config.max_turns:
        walk.stop_reason = "max_turns"
    elif walk.window is None:
        walk.pending = render_observation_delta(engine.tokenizer, result.observation, completion.ended_turn)
    else:
        next_context(walk, completion, result.observation, info, config)


def next_context(
    walk: Walk, completion: Completion, observation: str, info: Mapping[str, Any], config: RolloutConfig
) -> None:
    """Under a context policy other than `full`: the walk's next prompt from its context pieces after the
    turn it just recorded (`agentrl.agent.context`), appended when it extends the segment, else the whole
    prompt of a new segment."""
    assert walk.window is not None and walk.renderer is not None
    turn = len(walk.turns) - 1
    walk.window = advance(
        walk.window, config.context, walk.renderer, turn, completion.token_ids, completion.ended_turn,
        observation, info,
    )  # fmt: skip
    prompt, view = next_prompt(walk.window, config.context)
    if continues(walk.context, prompt):
        walk.pending = prompt[len(walk.context) :]
    else:
        walk.segment += 1
        walk.context, walk.pending = [], prompt
    walk.view = view


async def write_summary(
    engine: Engine, walk: Walk, sampling: SamplingParams, config: RolloutConfig, sampler_seed: int | None
) -> None:
    """The summary policy's turn: the latest observation and the summary instruction appended to the
    segment, the summary sampled (at most `summary_max_tokens`) and recorded as a turn the env never sees
    (`Turn.is_summary`: reward 0, the state it was written in), then a new segment whose head holds the
    task, the summary and the latest observation (`agentrl.agent.context.summarised`). Stops the walk with
    `max_tokens` when even the request cannot fit."""
    assert walk.window is not None and walk.renderer is not None
    context = config.context
    request = summary_request(walk.window, context, walk.renderer)
    if len(walk.context) + len(request) + context.summary_max_tokens > config.max_context_tokens:
        walk.stop_reason = "max_tokens"
        return
    index = len(walk.turns)
    params = replace(sampling, max_new_tokens=context.summary_max_tokens)
    if sampler_seed is not None:
        params = replace(params, seed=derive_seed(sampler_seed, index))
    completion = await engine.generate([*walk.context, *request], params)
    walk.turns.append(
        Turn(
            index=index,
            prompt_ids=tuple(request),
            completion_ids=completion.token_ids,
            completion_logprobs=completion.logprobs,
            text=completion.text,
            action=Action(text=completion.text),
            observation="",
            reward=0.0,
            invalid=False,
            state_key=walk.turns[-1].state_key,
            info={SUMMARY_INFO: True},
            finish_reason=completion.finish_reason,
            segment=walk.segment,
            prompt_view=walk.view,
        )
    )
    walk.summaries += 1
    walk.window = summarised(walk.window, walk.renderer, completion.text, index)
    prompt, walk.view = next_prompt(walk.window, context)
    walk.segment += 1
    walk.context, walk.pending = [], prompt


def walk_episode(
    walk: Walk | None,
    env_id: str,
    task: Mapping[str, Any],
    seed: int,
    group_id: str,
    start: SessionStart | None,
    error: str | None,
) -> Episode:
    """The `Episode` record of a walk (None: no session was opened); `error` makes it an infra failure."""
    turns = walk.turns if walk is not None else []
    stop: StopReason = (walk.stop_reason if walk is not None else None) or "max_turns"
    success = bool(turns and turns[-1].info.get("success", False))
    episode = build_episode(env_id, task, seed, group_id, turns, stop, start, success, error)
    if walk is None:
        return episode
    return replace(
        episode,
        episode_id=walk.episode_id,
        parent_id=walk.parent_id,
        branch_turn=walk.branch_turn,
        prompt_inputs=None if start is None else {"tools": start.tools, "examples": start.examples},
    )


def is_invalid(action: Action, info: Mapping[str, Any]) -> bool:
    """A turn is invalid when the env says so (`info["invalid"]`); an env that gives no verdict has it
    judged here: invalid when the turn did not parse or called no tool. Envs that read the turn's text
    themselves (the search env's Search-R1 tags) give one, so a good tag turn is not invalid for lacking a
    tool call."""
    if "invalid" in info:
        return bool(info["invalid"])
    return action.parse_error is not None or not action.tool_calls


async def collect_rollouts(
    client: SessionClient,
    engine: Engine,
    env_id: str,
    tasks: Sequence[Mapping[str, Any]],
    group_size: int,
    sampling: SamplingParams,
    config: RolloutConfig,
    seed: int,
    progress: bool = True,
    first_task_index: int = 0,
    player: EpisodePlayer = run_episode,
) -> list[Episode]:
    """`group_size` concurrent episodes per task, returned in task order, then member order.

    Members of a group share the env seed, so they start from the same state and differ only by what the
    policy samples (what group-relative advantages compare). The nonce keeps group ids unique across calls.
    `first_task_index` is the index of `tasks[0]` in a longer list that this call plays one block of (a
    rank's share of a step, `agentrl/trainer/dp_rollouts.py`): the seeds are those the whole list gets.
    `player` plays each episode: the built-in `run_episode`, or a harness (`harness.runner.choose_player`).
    """
    nonce = uuid.uuid4().hex[:8]
    with _progress_bar(progress, total=len(tasks) * group_size) as advance:

        async def play(task_index: int, task: Mapping[str, Any], member: int) -> Episode:
            group_id = f"{task.get('id', task_index)}-{nonce}"
            episode = await play_member(
                client, lambda: engine, env_id, task, episode_seed(seed, task_index), group_id, sampling,
                config, seed_parts=(seed, task_index, member), player=player,
            )  # fmt: skip
            advance()
            return episode

        return await run_concurrently(
            play(i, t, member) for i, t in enumerate(tasks, first_task_index) for member in range(group_size)
        )


async def run_concurrently(coroutines: Iterable[Coroutine[Any, Any, T]]) -> list[T]:
    """Await the coroutines as concurrent tasks; their results in the order given.

    With `asyncio.TaskGroup` semantics (the first error cancels the others, and waits until they have
    finished, e.g. closed their sessions), except that the error is raised as itself, not wrapped in an
    ExceptionGroup: callers and the CLI see `AuthError: ...`, not "unhandled errors in a TaskGroup". Errors
    that other tasks raised while being cancelled are attached to it as notes."""
    try:
        async with asyncio.TaskGroup() as group:
            tasks = [group.create_task(coroutine) for coroutine in coroutines]
    except BaseExceptionGroup as wrapped:
        first, *others = leaf_errors(wrapped)
        for other in others:
            first.add_note(f"another concurrent task failed too: {type(other).__name__}: {other}")
    else:
        return [task.result() for task in tasks]
    raise first  # outside the handler, so the group does not become its context; its own chain stays


def leaf_errors(group: BaseExceptionGroup) -> list[BaseException]:
    """The errors inside an exception group, nested groups flattened, in the order they were raised."""
    leaves: list[BaseException] = []
    for error in group.exceptions:
        leaves.extend(leaf_errors(error) if isinstance(error, BaseExceptionGroup) else [error])
    return leaves


async def play_member(
    client: SessionClient,
    engine_for_attempt: Callable[[], Engine],
    env_id: str,
    task: Mapping[str, Any],
    env_seed: int,
    group_id: str,
    sampling: SamplingParams,
    config: RolloutConfig,
    seed_parts: tuple[int, ...],
    player: EpisodePlayer = run_episode,
) -> Episode:
    """One member's episode of a group, played by `player` and re-run on a new session after an
    infrastructure failure (up to `config.infra_attempts`); with `config.seeded_sampling` each attempt
    samples with `derive_seed(*seed_parts, attempt)`. `engine_for_attempt` gives the engine each attempt
    uses."""
    attempts = iter(range(config.infra_attempts))

    def attempt() -> Awaitable[Episode]:
        number = next(attempts)
        sampler = derive_seed(*seed_parts, number) if config.seeded_sampling else None
        return player(
            client, engine_for_attempt(), env_id, task, env_seed, group_id, sampling, config,
            sampler_seed=sampler,
        )  # fmt: skip

    result = await play_with_retries(attempt, RetryConfig(max_attempts=config.infra_attempts))
    return replace(result.episode, attempts=result.attempts)


def derive_seed(*parts: int) -> int:
    """A 31-bit seed that depends on every part (a stable hash, the same in every process)."""
    digest = hashlib.blake2b(repr(parts).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") % 2**31


def episode_seed(seed: int, task_index: int) -> int:
    """The env seed of every member of task `task_index`'s group; deterministic in (seed, task_index)."""
    return (seed * 1_000_003 + task_index) % 2**31


@contextlib.contextmanager
def _progress_bar(enabled: bool, total: int) -> Iterator[Any]:
    """A transient Rich bar counting finished episodes; yields the function that advances it."""
    if not enabled:
        yield lambda: None
        return
    columns = (TextColumn("episodes"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, transient=True) as bar:
        task_id = bar.add_task("episodes", total=total)
        yield lambda: bar.advance(task_id)
