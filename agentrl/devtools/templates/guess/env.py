"""EnvnameEnv: guess the hidden number; every wrong guess is answered "higher" or "lower".

What this is: the game of the agentrl-env-envname plugin. A task is {"id", "high", "target"}: the hidden
number is `target`, somewhere in [1, high]. One tool, `guess(number)`: a right guess ends the episode with
reward 1 and `info["success"]`; a wrong one is answered "higher" or "lower" and narrows the interval still
possible; after `max_guesses` turns the episode is truncated. A turn without a usable guess is invalid
(`info["invalid"]`) and uses up a turn. Pure Python, microseconds a step: `blocking = False`.

State key: the task and the interval still possible. Two episodes that narrowed the interval to the same
numbers are in the same state, whatever guesses (in whatever order) got them there; that is what lets
step-level credit (GiGPO) compare their next guesses.

What this is not: the task generator (`agentrl_envname.make_tasks`) or the scripted policy
(`agentrl_envname.policy`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from agentrl.env import Env, StepResult, render_tool_call, tool_spec
from agentrl.errors import EnvError
from agentrl.types import Action

from agentrl_envname.make_tasks import HIGHS, make_task
from agentrl_envname.policy import scripted_policy

ENV_ID = "envname/Envname-v0"
MAX_GUESSES = 6

GUESS = tool_spec(
    "guess",
    "Guess the hidden number",
    {"number": {"type": "integer", "description": "your guess, a whole number"}},
)
FORMAT_HELP = "Call the guess tool, e.g. " + render_tool_call("guess", {"number": 4})


def question(high: int) -> str:
    return f"I am thinking of a whole number between 1 and {high}. Guess it."


def feedback(number: int, target: int, left: int) -> str:
    direction = "higher" if target > number else "lower"
    return f"No, the number is {direction} than {number}. Guesses left: {left}."


def state_key(task_id: str, low: int, high: int) -> str:
    """The numbers still possible: the same interval is the same state, whatever led there."""
    return f"{task_id}:{low}-{high}"


def solved_example(high: int, target: int, guesses: list[int]) -> list[dict[str, Any]]:
    """One solved episode as chat messages, in the env's own words, ending on the winning guess."""
    messages: list[dict[str, Any]] = [{"role": "user", "content": question(high)}]
    for turn, number in enumerate(guesses, 1):
        call = {"name": "guess", "arguments": {"number": number}}
        messages.append({"role": "assistant", "content": "", "tool_calls": [call]})
        if number != target:
            messages.append({"role": "tool", "content": feedback(number, target, MAX_GUESSES - turn)})
    return messages


def validate_task(task: Any) -> dict[str, Any]:
    """The task record, checked; the `EnvError` names the field that is wrong."""
    if not isinstance(task, Mapping):
        raise EnvError(f"options['task'] must be a task record (a dict), got {type(task).__name__}")
    if not isinstance(task.get("id"), str) or not task["id"]:
        raise EnvError("envname task is missing 'id' (a non-empty string)")
    high, target = task.get("high"), task.get("target")
    if not isinstance(high, int) or high < 1:
        raise EnvError(f"envname task {task['id']!r}: 'high' must be a positive integer, got {high!r}")
    if not isinstance(target, int) or not 1 <= target <= high:
        raise EnvError(f"envname task {task['id']!r}: 'target' must be an integer in [1, {high}]")
    return dict(task)


def guessed_number(action: Action) -> int | None:
    """The number of the turn's first tool call if it is a guess (digits in a string count), else None."""
    if not action.tool_calls or action.tool_calls[0].name != "guess":
        return None
    value = action.tool_calls[0].arguments.get("number")
    if isinstance(value, str) and value.strip().isdigit():
        return int(value)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


class EnvnameEnv(Env):
    """Guess the hidden number; see the module docstring."""

    tools = (GUESS,)
    # two solved episodes on ranges no task uses (1-10, 1-6): a small model copies their format
    examples = (*solved_example(10, 7, [5, 8, 7]), *solved_example(6, 2, [3, 2]))
    blocking = False  # a step is pure Python: the service runs it on its event loop
    scripted_policy = staticmethod(scripted_policy)  # demonstrations (agentrl demos) and checks

    def __init__(self, max_guesses: int = MAX_GUESSES) -> None:
        super().__init__()
        self.max_guesses = max_guesses
        self._task: dict[str, Any] | None = None
        self._low = self._high = self._turns = 0

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[str, dict[str, Any]]:
        super().reset(seed=seed)  # seeds self.np_random
        task = (options or {}).get("task")
        self._task = validate_task(task) if task is not None else self._draw_task()
        self._low, self._high, self._turns = 1, self._task["high"], 0
        return question(self._task["high"]), {"state_key": self._state_key()}

    def step(self, action: Action) -> StepResult:
        task = self._task
        assert task is not None  # Env's guard: step() runs only after a successful reset()
        self._turns += 1
        number = guessed_number(action)
        if number is None:
            problem = action.parse_error or "your turn has no guess call"
            return self._result(f"Error: {problem}. {FORMAT_HELP}", 0.0, invalid=True)
        if number == task["target"]:
            return self._result("Correct!", 1.0, success=True)
        if number < task["target"]:
            self._low = max(self._low, number + 1)
        else:
            self._high = min(self._high, number - 1)
        return self._result(feedback(number, task["target"], self.max_guesses - self._turns), 0.0)

    def _result(
        self, observation: str, reward: float, *, invalid: bool = False, success: bool = False
    ) -> StepResult:
        truncated = not success and self._turns >= self.max_guesses
        info = {"state_key": self._state_key(), "invalid": invalid, "success": success}
        return StepResult(observation, reward, success, truncated, info)

    def _state_key(self) -> str:
        assert self._task is not None
        return state_key(self._task["id"], self._low, self._high)

    def _draw_task(self) -> dict[str, Any]:
        """A task drawn from the seed: Gymnasium's env checker resets without one."""
        high = int(self.np_random.choice(HIGHS))
        return make_task(high, int(self.np_random.integers(1, high + 1)))
