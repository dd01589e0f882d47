"""The random policy of `agentrl envs check` (`agentrl/devtools/service_check.py`, `--policy random`).

What this is: a `ScriptedPolicy` (`agentrl.env.scripted`) that picks a tool and fills its arguments from
the tool's JSON schema with small values drawn from a short list (so that the episodes of a group can meet
in the same states), and one turn in five is plain text without a tool call.

What this is not: a scripted policy that tries to solve the task (the env class's `scripted_policy`, or one
the caller names, played the same way), or a model's sampling.
"""

from __future__ import annotations

from collections.abc import Generator, Mapping, Sequence
from typing import Any

import numpy as np

from agentrl.env.scripted import ScriptedPolicy, ScriptedTurn
from agentrl.env.toolcall import render_tool_call

RANDOM_STRINGS = ("1", "yes", "hello", "ls", "cat notes.txt", "42")  # few, so group members can agree
RANDOM_INTEGERS = (0, 1, 2, 3, 4, 5, 8, 10, 16, 32)
PLAIN_TEXT_TURN = "I am not sure what to do."
PLAIN_TEXT_EVERY = 5  # the random policy's chance of a turn without a tool call is one in this


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
