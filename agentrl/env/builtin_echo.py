"""`agentrl/Echo-v0`: a trivial, non-sandboxed env that answers each turn with its own text.

What this is: the env `bench/service.py` measures the env service's wire with, and a smoke target for a
fresh service (`python -m agentrl.service --preload agentrl.env.builtin_echo`). Importing this module
registers it. Each step costs microseconds, so a benchmark on it measures the service and the client, not
the env. The episode truncates after `max_steps` turns; the state key is the step count.

What this is not: a training env (there is nothing to learn) or a plugin (it ships inside agentrl and is
registered only when imported).
"""

from __future__ import annotations

from typing import Any

from agentrl.env.core import Env, StepResult, tool_spec
from agentrl.env.registration import register
from agentrl.types import Action

ECHO_ID = "agentrl/Echo-v0"


class EchoEnv(Env):
    """Observation = the action's text (or the first tool call's `text` argument); reward 0."""

    tools = (tool_spec("echo", "Echo a text back.", {"text": {"type": "string"}}),)
    blocking = False  # a step is a string copy: stepped on the service's event loop
    fork_capability = "copy"

    def __init__(self, max_steps: int = 1_000_000) -> None:
        super().__init__()
        self.max_steps = max_steps
        self._steps = 0

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[str, dict]:
        super().reset(seed=seed)
        self._steps = 0
        return "ready", {"state_key": "0"}

    def step(self, action: Action) -> StepResult:
        self._steps += 1
        text = action.text
        if action.tool_calls and isinstance(action.tool_calls[0].arguments.get("text"), str):
            text = action.tool_calls[0].arguments["text"]
        truncated = self._steps >= self.max_steps
        return StepResult(text, 0.0, False, truncated, {"state_key": str(self._steps)})


register(ECHO_ID, entry_point=EchoEnv)
