"""A scripted policy for envname: grep the key, then submit the value the output shows.

What this is: `scripted_policy`, the `ScriptedPolicy` (`agentrl.env.scripted`) that `EnvnameEnv` carries:
`agentrl demos --task envname`, `agentrl envs check envname/Envname-v0 --policy scripted` and the tests
(with Docker) play it. If a script cannot reach `info["success"]`, no model will. What this is not: part
of RL training.
"""

from __future__ import annotations

from collections.abc import Generator, Mapping
from typing import Any

from agentrl.env import ScriptedTurn
from agentrl.types import Action, ToolCall


def call(name: str, argument: str, value: str) -> Action:
    return Action(text="", tool_calls=(ToolCall(name, {argument: value}),))


def scripted_policy(
    task: Mapping[str, Any], observation: str, env_kwargs: Mapping[str, Any]
) -> Generator[ScriptedTurn, str, None]:
    """First a grep for the key's line, then a submit of what follows its " = "."""
    output = yield call("shell", "command", f"grep '^{task['key']} = ' {task['file']}")
    yield call("submit", "answer", output.strip().rsplit(" = ", 1)[-1])
