"""Tiny pure-Python envs for tests without Docker: guess-the-number, and one that loses its sandbox.

What this is: real `agentrl.env.Env` subclasses, registered on import as `test/GuessNumber-v0` and
`test/LostSandbox-v0`, so the registry, the service and the client can be exercised end to end. The env
service imports this module with `--preload fixtures_envs`.

What this is not: a training env. GuessNumber's optimal policy is binary search; nothing here is learned.
"""

from __future__ import annotations

from typing import Any

from agentrl.env import Env, StepResult, register, tool_spec
from agentrl.env.core import seed_rng
from agentrl.errors import SandboxLost
from agentrl.types import Action

GUESS_NUMBER_ID = "test/GuessNumber-v0"
LOST_SANDBOX_ID = "test/LostSandbox-v0"


class GuessNumberEnv(Env):
    """Guess an integer in [1, high]; each guess is answered "higher", "lower" or "correct".

    Task: {"target": int} (optional; drawn from the seed when absent). State key: the interval still
    possible, which is what the agent's guesses change.
    """

    tools = (tool_spec("guess", "Guess the hidden number.", {"number": {"type": "integer"}}),)
    fork_capability = "copy"
    examples = (
        {"role": "user", "content": "Guess a number between 1 and 10."},
        {
            "role": "assistant",
            "content": '<tool_call>{"name": "guess", "arguments": {"number": 5}}</tool_call>',
        },
    )

    def __init__(self, high: int = 100, max_guesses: int = 8) -> None:
        super().__init__()
        self.high = high
        self.max_guesses = max_guesses
        self._target = 1
        self._low, self._high_left, self._guesses = 1, high, 0

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[str, dict]:
        super().reset(seed=seed)
        task = (options or {}).get("task") or {}
        target = task.get("target", int(seed_rng(seed).integers(1, self.high + 1)))
        if not isinstance(target, int) or not 1 <= target <= self.high:
            raise ValueError(f"task target must be an integer in [1, {self.high}], got {target!r}")
        self._target, self._low, self._high_left, self._guesses = target, 1, self.high, 0
        return f"Guess a number between 1 and {self.high}.", {"state_key": self._state_key()}

    def step(self, action: Action) -> StepResult:
        number = _guessed_number(action)
        if number is None:
            return StepResult(
                "Call the guess tool with an integer number.",
                0.0,
                False,
                self._out_of_guesses(),
                self._info(True),
            )
        self._guesses += 1
        if number == self._target:
            return StepResult("correct", 1.0, True, False, self._info(False))
        if number < self._target:
            self._low = max(self._low, number + 1)
        else:
            self._high_left = min(self._high_left, number - 1)
        answer = "higher" if number < self._target else "lower"
        return StepResult(answer, 0.0, False, self._out_of_guesses(), self._info(False))

    def _out_of_guesses(self) -> bool:
        return self._guesses >= self.max_guesses

    def _state_key(self) -> str:
        return f"{self._low}-{self._high_left}"

    def _info(self, invalid: bool) -> dict[str, Any]:
        return {"state_key": self._state_key(), "invalid": invalid}


def _guessed_number(action: Action) -> int | None:
    calls = [call for call in action.tool_calls if call.name == "guess"]
    number = calls[0].arguments.get("number") if calls else None
    return number if isinstance(number, int) else None


class LostSandboxEnv(GuessNumberEnv):
    """Like GuessNumber, but every step fails as if its sandbox container had died."""

    def step(self, action: Action) -> StepResult:
        raise SandboxLost("the sandbox container exited unexpectedly (test env)")


register(GUESS_NUMBER_ID, entry_point=GuessNumberEnv)
register(LOST_SANDBOX_ID, entry_point=LostSandboxEnv, kwargs={"high": 10})
