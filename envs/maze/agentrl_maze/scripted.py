"""The maze's scripted policy (`agentrl demos --policy scripted`): the BFS-shortest path as move calls.

What this is: `scripted_policy`, the env's optional demonstrating policy (the `ScriptedPolicy` contract of
`agentrl.demos`): it reads the task's layout, so it never needs the observations it is sent. What this is not:
a baseline (it knows the whole board, as the tests' scripted plays do).
"""

from __future__ import annotations

from collections.abc import Generator, Mapping
from typing import Any

from agentrl.types import Action, ToolCall
from agentrl_maze.levels import parse_layout, solve


def scripted_policy(
    task: Mapping[str, Any], observation: str, env_kwargs: Mapping[str, Any]
) -> Generator[Action, str, None]:
    """One `move(direction)` call per turn along a shortest path to G (taking the key first at level 3)."""
    for direction in solve(parse_layout(task["layout"])) or ():
        yield Action(text="", tool_calls=(ToolCall("move", {"direction": direction}),))
