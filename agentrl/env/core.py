"""The Env contract: a genuine `gymnasium.Env` with text observations and parsed-turn actions.

What this is: the base class every agentrl environment subclasses (its docstring is the contract), the
`StepResult` named 5-tuple, the names of the `info` keys the runner reads, and the two spaces (a Text space
whose charset admits any printable text, and `TurnSpace`, whose members are parsed assistant turns).
Because it is plain Gymnasium, `gymnasium.make`, `TimeLimit`, `RecordEpisodeStatistics` and Gymnasium's env
checker all work on it. The base class also guards the order of calls, so no env has to: a step before the
first successful reset, or after the episode ended, raises.

What this is not: a sandbox or a server. Envs that run code own a sandbox (see `agentrl/sandbox/`) and are
served over HTTP by `agentrl/service/`; this module knows nothing about either. docs/env_contract.md is the
guide for env authors.
"""

from __future__ import annotations

import copy
import functools
import string
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final, Literal, NamedTuple

import gymnasium
import numpy as np
from gymnasium import spaces

from agentrl.errors import EnvError, EpisodeOver, ForkUnsupported
from agentrl.types import Action, ToolCall

MAX_TEXT_LENGTH = 1_000_000
TEXT_CHARSET = frozenset(string.printable) | frozenset(chr(c) for c in range(0xA0, 0x3000))

INFO_SUCCESS: Final = "success"
"""`info` key: bool, the episode was solved. The runner reads it from the last step's info."""
INFO_INVALID: Final = "invalid"
"""`info` key: bool, this turn was not a valid action. When absent the runner judges for itself."""
INFO_STATE_KEY: Final = "state_key"
"""`info` key: hashable key of the env state after reset or step (not of the history), or None."""
INFO_CONTEXT_RESET: Final = "context_reset"
"""`info` key: bool, a boundary: what comes next needs none of the turns before (`rollout.context`)."""
INFO_STATE_TEXT: Final = "state_text"
"""`info` key: str, what the agent must remember, written after the task of a windowed prompt."""

_Phase = Literal["before_reset", "running", "over"]
_GUARD_MARK = "__agentrl_guarded__"  # set on the wrapped reset, step and fork, so each is wrapped only once

ForkCapability = Literal["copy", "sandbox", "replay", "none"]
"""How an env forks (`Env.fork_capability`): "copy" deep-copies its state; "sandbox" forks its sandbox's
workdir plus its own state; "replay" replays the episode's reset and actions into a fresh env; "none"
refuses (`ForkUnsupported`)."""
FORK_CAPABILITIES: Final[tuple[ForkCapability, ...]] = ("copy", "sandbox", "replay", "none")


class FullText(spaces.Text):
    """`spaces.Text` that admits any string up to `max_length` (the default charset is alphanumeric only)."""

    def __init__(self, max_length: int = MAX_TEXT_LENGTH, seed: int | None = None):
        super().__init__(max_length=max_length, min_length=0, charset=string.printable, seed=seed)

    def contains(self, x: Any) -> bool:
        return isinstance(x, str) and len(x) <= self.max_length


class TurnSpace(gymnasium.Space[Action]):
    """The action space: a parsed assistant turn (`Action`: text plus zero or more `ToolCall`s)."""

    def __init__(self, tool_names: Sequence[str] = (), seed: int | None = None):
        super().__init__(shape=None, dtype=None, seed=seed)
        self.tool_names = tuple(tool_names)

    @property
    def is_np_flattenable(self) -> bool:
        return False

    def contains(self, x: Any) -> bool:
        return isinstance(x, Action) and all(isinstance(call, ToolCall) for call in x.tool_calls)

    def sample(self, mask: Any = None, probability: Any = None) -> Action:
        if not self.tool_names:
            return Action(text="")
        name = self.tool_names[int(self.np_random.integers(len(self.tool_names)))]
        return Action(text="", tool_calls=(ToolCall(name=name, arguments={}),))

    def __repr__(self) -> str:
        return f"TurnSpace(tools={list(self.tool_names)})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, TurnSpace) and other.tool_names == self.tool_names


class StepResult(NamedTuple):
    """Gymnasium's 5-tuple, with names."""

    observation: str
    reward: float
    terminated: bool
    truncated: bool
    info: dict[str, Any]


class Env(gymnasium.Env[str, Action]):
    """Base class of agentrl environments. Subclasses set `tools` and implement `reset` and `step`.

    - `reset(*, seed=None, options=None) -> (observation, info)`: `options["task"]` is the task record;
      without one the env draws a task from `seed`. `info["state_key"]` is the initial state.
    - `step(action) -> StepResult(observation, reward, terminated, truncated, info)`. `action` is the parsed
      assistant turn; a turn that did not parse arrives with no tool calls and `action.parse_error` set, and
      the env answers it with an error observation, never an exception.

    The `info` keys the runner reads (`INFO_SUCCESS`, `INFO_INVALID`, `INFO_STATE_KEY`):
    - `info["success"]`: the episode was solved. Read from the last step's info; absent means False.
    - `info["invalid"]`: this turn was not a valid action. The runner records it on the turn and credit may
      penalise it. When absent the runner judges: a turn with no parseable tool call is invalid. Envs that
      read the turn's text themselves (tags instead of tool calls) must set it.
    - `info["state_key"]`: a canonical hashable key of the env state after the step (or the reset), not of
      the history that led there; None when the env cannot tell. GiGPO, HGPO and SALT group the steps taken
      in the same state, so a key must recur whenever the episodes of a group reach the same state;
      keying the history makes every group a singleton and step-level credit learns nothing.
      `agentrl.env.text_state_key` and `agentrl.sandbox.state.workspace_state_key` build such keys.
    - `info["context_reset"]` (optional, `INFO_CONTEXT_RESET`): True on a step after which the episode
      needs none of the turns before (e.g. the next part of a multi-part task starts): under
      `rollout.context.policy=window` the next prompt is a fresh window around this step's observation.
    - `info["state_text"]` (optional, `INFO_STATE_TEXT`): a short text the agent must remember whatever the
      window drops (e.g. "files changed so far: a.py"); `window` writes the latest one after the task.
      `mask` never masks a boundary's observation; `full` and `summary` ignore both (docs/context.md).

    Class attributes (an instance may set its own in `__init__`, before `super().__init__()` for `tools`):
    - `tools`: JSON-schema tool specs in the OpenAI function format (`tool_spec`), shown to the model.
    - `examples`: few-shot chat messages (`{"role", "content"}`, assistant messages may carry
      `"tool_calls": [{"name", "arguments"}]`) shown before the task. Small models need them to make any
      valid tool call at all; end them on an assistant action.
    - `blocking`: True (the default) when `step` may wait (a sandbox, a network call); the service then runs
      it in a worker thread. An env whose steps return in microseconds without I/O sets it to False and is
      stepped on the service's event loop, which saves the thread hand-off.
    - `fork_capability` (`ForkCapability`, default "none"): how `fork()` copies the env mid-episode.

    Fork: `fork() -> Env` returns an independent env in this one's state: the same action on both gives the
    same `StepResult` (observation, reward, flags, info's state key), and stepping one never changes the
    other. The fork keeps the episode's counters and budgets (its turns taken count against `max_steps`),
    has been reset (it can be stepped at once) and must be closed like any env. By capability:
    - "copy": the base `fork()` deep-copies the instance's attributes (its RNG included), except those
      named in `fork_reopened`, which the fork gets as None and opens again itself (a leased client, a
      connection): pure-Python envs only set the capability.
    - "sandbox": the env overrides `fork()`: `copy_env(self, reopened=("_sandbox",))`, then the sandbox's
      `DockerSandbox.fork` (a copy of its workdir) for the fork's own sandbox.
    - "replay": the base `fork()` makes `spawn()` (a fresh env of this configuration, which the env
      implements), resets it with this episode's reset arguments and steps it with the episode's actions
      (the guards record both); it raises `EnvError` when the replay does not end in the same observation
      and state key (the env is not deterministic).
    - "none": `fork()` raises `ForkUnsupported` (the service answers 409).

    Guards: the `reset`, `step` and `fork` of every subclass (its own, a mixin's, or Gymnasium's `reset`)
    are wrapped when the class is created (`__init_subclass__`). A step or fork before a successful reset
    raises `EnvError`; one after a step that terminated or truncated the episode raises `EpisodeOver`, until
    the next reset. Subclasses do not check either themselves.
    """

    metadata: dict[str, Any] = {"render_modes": []}
    tools: tuple[Mapping[str, Any], ...] = ()
    examples: tuple[Mapping[str, Any], ...] = ()
    blocking: bool = True
    fork_capability: ForkCapability = "none"
    fork_reopened: tuple[str, ...] = ()
    _phase: _Phase = "before_reset"  # a class default, so the guard works even without super().__init__()
    _turns_taken: int = 0  # steps since the last reset, kept by the guards (and by a fork)
    _stepping: bool = False  # inside the outermost guarded step
    _replay: _Replay | None = None  # the episode so far, recorded by the guards of a "replay" env

    def __init__(self) -> None:
        self.observation_space = FullText()
        self.action_space = TurnSpace(tool_names=[spec["function"]["name"] for spec in self.tools])

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        # whatever the class resolves to (its own method, a mixin's, Gymnasium's) is wrapped once
        if not getattr(cls.reset, _GUARD_MARK, False):
            cls.reset = _tracking_reset(cls.reset)  # type: ignore[method-assign]
        if not getattr(cls.step, _GUARD_MARK, False):
            cls.step = _guarded_step(cls.step)  # type: ignore[method-assign,assignment]
        if not getattr(cls.fork, _GUARD_MARK, False):
            cls.fork = _guarded_fork(cls.fork)  # type: ignore[method-assign,assignment]

    def step(self, action: Action) -> StepResult:  # type: ignore[override]
        raise NotImplementedError(f"{type(self).__name__} must implement step(action) -> StepResult")

    @property
    def turns_taken(self) -> int:
        """Steps taken since the last reset (a fork starts with its parent's)."""
        return self._turns_taken

    def fork(self) -> Env:
        """An independent env in this env's state (see the class docstring, "Fork")."""
        if self.fork_capability == "copy":
            return copy_env(self, self.fork_reopened)
        if self.fork_capability == "replay":
            return replay_env(self)
        raise NotImplementedError(
            f"{type(self).__name__} says fork_capability={self.fork_capability!r} and must implement fork()"
        )

    def spawn(self) -> Env:
        """A fresh env of this configuration, not reset: what a "replay" fork replays the episode into."""
        raise NotImplementedError(f"{type(self).__name__} forks by replay and must implement spawn()")


class _Replay(NamedTuple):
    """The episode so far of a "replay" env: how it was reset, the actions since, where they ended."""

    reset_args: tuple[Any, ...]
    reset_kwargs: dict[str, Any]
    actions: list[Action]
    last: tuple[str, Any]  # (observation, state key) after the reset or the last step


_SHARED_BY_FORKS = frozenset({"observation_space", "action_space", "spec"})
"""Attributes a "copy" fork shares with its parent: configuration that no step changes (and whose deep copy
would cost most of the fork)."""


def copy_env(env: Env, reopened: Sequence[str] = ()) -> Env:
    """A deep copy of `env`'s attributes (one memo, so shared references stay shared), except the spaces
    and spec (shared) and those named in `reopened` (None); the guards' bookkeeping is copied too."""
    child = object.__new__(type(env))
    memo: dict[int, Any] = {}
    for name, value in vars(env).items():
        if name in _SHARED_BY_FORKS:
            child.__dict__[name] = value
        else:
            child.__dict__[name] = None if name in reopened else copy.deepcopy(value, memo)
    return child


def replay_env(env: Env) -> Env:
    """`env.spawn()` reset and stepped like `env`'s episode so far; `EnvError` if it ends elsewhere."""
    replay = env._replay
    if replay is None:
        raise EnvError(f"{type(env).__name__} recorded no episode to replay; call reset() first")
    child = env.spawn()
    try:
        child.reset(*replay.reset_args, **copy.deepcopy(replay.reset_kwargs))
        for action in replay.actions:
            child.step(action)
        assert child._replay is not None  # recorded by the guards of the reset and steps above
        if child._replay.last != replay.last:
            raise EnvError(
                f"{type(env).__name__}: replaying {len(replay.actions)} actions did not reach the episode's "
                "state (the env is not deterministic); it cannot fork by replay: set fork_capability='none'"
            )
    except BaseException:
        child.close()
        raise
    return child


def _tracking_reset(reset: Callable[..., Any]) -> Callable[..., Any]:
    """`reset`, recording whether it succeeded: a failed reset leaves no episode to step."""

    @functools.wraps(reset)
    def tracking_reset(self: Env, *args: Any, **kwargs: Any) -> Any:
        self._phase = "before_reset"
        try:
            result = reset(self, *args, **kwargs)
        except BaseException:
            self._phase = "before_reset"  # a subclass's reset can fail after its parent's succeeded
            raise
        self._phase, self._turns_taken = "running", 0
        if self.fork_capability == "replay":
            observation, info = result
            last = (observation, info.get(INFO_STATE_KEY))
            self._replay = _Replay(args, copy.deepcopy(kwargs), [], last)
        return result

    setattr(tracking_reset, _GUARD_MARK, True)
    return tracking_reset


def _guarded_step(step: Callable[[Env, Action], StepResult]) -> Callable[[Env, Action], StepResult]:
    """`step`, refused before reset and after the episode's end, which it records."""

    @functools.wraps(step)
    def guarded_step(self: Env, action: Action) -> StepResult:
        if self._stepping:  # a subclass's step calling its parent's: the outer guard does the bookkeeping
            return step(self, action)
        _check_running(self, "step")
        self._stepping = True
        try:
            result = step(self, action)
        finally:
            self._stepping = False
        self._turns_taken += 1
        if self._replay is not None:
            self._replay.actions.append(action)
            self._replay = self._replay._replace(last=(result[0], result[4].get(INFO_STATE_KEY)))
        if result[2] or result[3]:
            self._phase = "over"
        return result

    setattr(guarded_step, _GUARD_MARK, True)
    return guarded_step


def _guarded_fork(fork: Callable[[Env], Env]) -> Callable[[Env], Env]:
    """`fork`, refused before reset, after the episode's end and by an env that cannot fork; the fork is
    marked reset, with this env's turn count and recorded episode."""

    @functools.wraps(fork)
    def guarded_fork(self: Env) -> Env:
        _check_running(self, "fork")
        if self.fork_capability not in FORK_CAPABILITIES or self.fork_capability == "none":
            raise ForkUnsupported(
                f"{type(self).__name__} cannot fork (fork_capability={self.fork_capability!r}); "
                "play independent episodes with it instead of branching"
            )
        child = fork(self)
        child._phase, child._turns_taken = "running", self._turns_taken
        if self._replay is not None:
            child._replay = self._replay._replace(actions=list(self._replay.actions))
        return child

    setattr(guarded_fork, _GUARD_MARK, True)
    return guarded_fork


def _check_running(env: Env, call: str) -> None:
    if env._phase == "before_reset":
        raise EnvError(
            f"{type(env).__name__}.{call}() was called before reset(); "
            "call reset(options={'task': ...}) first"
        )
    if env._phase == "over":
        raise EpisodeOver(
            f"{type(env).__name__}: the episode is over (it terminated or was truncated); "
            "call reset() to start a new one"
        )


def tool_spec(name: str, description: str, parameters: Mapping[str, Any]) -> dict[str, Any]:
    """A JSON-schema tool spec in the OpenAI function format; every parameter is required."""
    required = [key for key in parameters]
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": description,
            "parameters": {"type": "object", "properties": dict(parameters), "required": required},
        },
    }


def seed_rng(seed: int | None) -> np.random.Generator:
    """The one way envs turn a seed into a generator."""
    return np.random.default_rng(seed)
