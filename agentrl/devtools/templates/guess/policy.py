"""A scripted policy for envname: binary search, turn by turn.

What this is: `scripted_policy`, the `ScriptedPolicy` (`agentrl.env.scripted`) that `EnvnameEnv` carries:
`agentrl demos --task envname`, `agentrl envs check envname/Envname-v0 --policy scripted` and the tests
play it. If a script cannot reach `info["success"]`, no model will. What this is not: part of RL training.
"""

from __future__ import annotations

import re
from collections.abc import Generator, Mapping
from typing import Any

from agentrl.env import ScriptedTurn
from agentrl.types import Action, ToolCall

FEEDBACK = re.compile(r"(?P<direction>higher|lower) than (?P<number>\d+)")


def guess(number: int) -> Action:
    return Action(text="", tool_calls=(ToolCall("guess", {"number": number}),))


def scripted_policy(
    task: Mapping[str, Any], observation: str, env_kwargs: Mapping[str, Any]
) -> Generator[ScriptedTurn, str, None]:
    """Guess the middle of the interval the feedback so far leaves open, until the feedback stops."""
    low, high = 1, int(task["high"])
    while low <= high:
        number = (low + high) // 2
        said = FEEDBACK.search((yield guess(number)))
        if said is None:
            return  # "Correct!": the episode is over
        if said["direction"] == "higher":
            low = number + 1
        else:
            high = number - 1
