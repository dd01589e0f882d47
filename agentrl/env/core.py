"""The Env contract: a genuine `gymnasium.Env` with text observations and parsed-turn actions.

What this is: the base class every agentrl environment subclasses, the `StepResult` named 5-tuple, and the
two spaces (a Text space whose charset admits any printable text, and `TurnSpace`, whose members are parsed
assistant turns). Because it is plain Gymnasium, `gymnasium.make`, `TimeLimit`, `RecordEpisodeStatistics`
and Gymnasium's env checker all work on it.

What this is not: a sandbox or a server. Envs that run code own a sandbox (see `agentrl/sandbox/`) and are
served over HTTP by `agentrl/service/`; this module knows nothing about either.

Contract, in short:
- `reset(seed=..., options={"task": {...}})` -> (observation, info); `info["state_key"]` is the initial state.
- `step(action: Action)` -> StepResult(observation, reward, terminated, truncated, info); `info["state_key"]`
  is a canonical hashable key of the state after the step (not of the history), or None.
- An unparseable turn arrives as an `Action` with no tool calls; the env answers with an error observation
  and sets `info["invalid"] = True`.
- `tools` lists JSON-schema tool specs (OpenAI function format) shown to the model.
"""

from __future__ import annotations

import string
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

import gymnasium
import numpy as np
from gymnasium import spaces

from agentrl.types import Action, ToolCall

MAX_TEXT_LENGTH = 1_000_000
TEXT_CHARSET = frozenset(string.printable) | frozenset(chr(c) for c in range(0xA0, 0x3000))


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

    `blocking`: True (the default) when `step` may wait (a sandbox, a network call); the service then runs it
    in a worker thread. An env whose steps return in microseconds without I/O sets it to False and is
    stepped on the service's event loop, which saves the thread hand-off (~100 us of CPU per step).
    """

    metadata: dict[str, Any] = {"render_modes": []}
    tools: tuple[Mapping[str, Any], ...] = ()
    blocking: bool = True

    def __init__(self) -> None:
        self.observation_space = FullText()
        self.action_space = TurnSpace(tool_names=[spec["function"]["name"] for spec in self.tools])

    def step(self, action: Action) -> StepResult:  # type: ignore[override]
        raise NotImplementedError


def tool_spec(name: str, description: str, parameters: Mapping[str, Any]) -> dict[str, Any]:
    """A JSON-schema tool spec in the OpenAI function format."""
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
