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

import functools
import string
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final, Literal, NamedTuple

import gymnasium
import numpy as np
from gymnasium import spaces

from agentrl.errors import EnvError, EpisodeOver
from agentrl.types import Action, ToolCall

MAX_TEXT_LENGTH = 1_000_000
TEXT_CHARSET = frozenset(string.printable) | frozenset(chr(c) for c in range(0xA0, 0x3000))

INFO_SUCCESS: Final = "success"
"""`info` key: bool, the episode was solved. The runner reads it from the last step's info."""
INFO_INVALID: Final = "invalid"
"""`info` key: bool, this turn was not a valid action. When absent the runner judges for itself."""
INFO_STATE_KEY: Final = "state_key"
"""`info` key: hashable key of the env state after reset or step (not of the history), or None."""

_Phase = Literal["before_reset", "running", "over"]
_GUARD_MARK = "__agentrl_guarded__"  # set on the wrapped reset and step, so each is wrapped only once


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

    Class attributes (an instance may set its own in `__init__`, before `super().__init__()` for `tools`):
    - `tools`: JSON-schema tool specs in the OpenAI function format (`tool_spec`), shown to the model.
    - `examples`: few-shot chat messages (`{"role", "content"}`, assistant messages may carry
      `"tool_calls": [{"name", "arguments"}]`) shown before the task. Small models need them to make any
      valid tool call at all; end them on an assistant action.
    - `blocking`: True (the default) when `step` may wait (a sandbox, a network call); the service then runs
      it in a worker thread. An env whose steps return in microseconds without I/O sets it to False and is
      stepped on the service's event loop, which saves the thread hand-off.

    Guards: the `reset` and `step` of every subclass (its own, a mixin's, or Gymnasium's `reset`) are wrapped
    when the class is created (`__init_subclass__`). A step before a successful reset raises `EnvError`; a
    step after one that terminated or truncated the episode raises `EpisodeOver`, until the next reset.
    Subclasses do not check either themselves.
    """

    metadata: dict[str, Any] = {"render_modes": []}
    tools: tuple[Mapping[str, Any], ...] = ()
    examples: tuple[Mapping[str, Any], ...] = ()
    blocking: bool = True
    _phase: _Phase = "before_reset"  # a class default, so the guard works even without super().__init__()

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

    def step(self, action: Action) -> StepResult:  # type: ignore[override]
        raise NotImplementedError(f"{type(self).__name__} must implement step(action) -> StepResult")


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
        self._phase = "running"
        return result

    setattr(tracking_reset, _GUARD_MARK, True)
    return tracking_reset


def _guarded_step(step: Callable[[Env, Action], StepResult]) -> Callable[[Env, Action], StepResult]:
    """`step`, refused before reset and after the episode's end, which it records."""

    @functools.wraps(step)
    def guarded_step(self: Env, action: Action) -> StepResult:
        _check_running(self)
        result = step(self, action)
        if result[2] or result[3]:
            self._phase = "over"
        return result

    setattr(guarded_step, _GUARD_MARK, True)
    return guarded_step


def _check_running(env: Env) -> None:
    if env._phase == "before_reset":
        raise EnvError(
            f"{type(env).__name__}.step() was called before reset(); "
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
