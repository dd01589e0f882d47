"""The pure-Python game `agentrl envs new NAME` writes: guess the hidden number, told "higher" or "lower".

What this is: `string.Template` texts of the plugin's env, task generator, scripted policy, run config and
tests (placeholders as in `agentrl.env.scaffold.common`), rendered by `agentrl.env.scaffold`. Rendered for
NAME=hilo they are the env docs/environments.md walks through (a test checks that the page quotes them).
What this is not: an env agentrl registers; nothing here runs until it is rendered and installed.
"""

from __future__ import annotations

GAME = "guess the hidden number; every wrong guess is answered higher or lower."

ENV = '''\
"""${Name}Env: guess the hidden number; every wrong guess is answered "higher" or "lower".

What this is: the game of the $dist plugin. A task is {"id", "high", "target"}: the hidden
number is `target`, somewhere in [1, high]. One tool, `guess(number)`: a right guess ends the episode with
reward 1 and `info["success"]`; a wrong one is answered "higher" or "lower" and narrows the interval still
possible; after `max_guesses` turns the episode is truncated. A turn without a usable guess is invalid
(`info["invalid"]`) and uses up a turn. Pure Python, microseconds a step: `blocking = False`.

State key: the task and the interval still possible. Two episodes that narrowed the interval to the same
numbers are in the same state, whatever guesses (in whatever order) got them there; that is what lets
step-level credit (GiGPO) compare their next guesses.

What this is not: the task generator (`$package.make_tasks`) or a policy (`$package.policy`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from agentrl.env import Env, StepResult, render_tool_call, tool_spec
from agentrl.errors import EnvError
from agentrl.types import Action

from $package.make_tasks import HIGHS, make_task

ENV_ID = "$env_id"
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
        raise EnvError("$name task is missing 'id' (a non-empty string)")
    high, target = task.get("high"), task.get("target")
    if not isinstance(high, int) or high < 1:
        raise EnvError(f"$name task {task['id']!r}: 'high' must be a positive integer, got {high!r}")
    if not isinstance(target, int) or not 1 <= target <= high:
        raise EnvError(f"$name task {task['id']!r}: 'target' must be an integer in [1, {high}]")
    return dict(task)


def guessed_number(action: Action) -> int | None:
    """The number of the turn's first tool call if it is a guess (digits in a string count), else None."""
    if not action.tool_calls or action.tool_calls[0].name != "guess":
        return None
    value = action.tool_calls[0].arguments.get("number")
    if isinstance(value, str) and value.strip().isdigit():
        return int(value)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


class ${Name}Env(Env):
    """Guess the hidden number; see the module docstring."""

    tools = (GUESS,)
    # two solved episodes on ranges no task uses (1-10, 1-6): a small model copies their format
    examples = (*solved_example(10, 7, [5, 8, 7]), *solved_example(6, 2, [3, 2]))
    blocking = False  # a step is pure Python: the service runs it on its event loop

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
'''

MAKE_TASKS = '''\
"""The $name task suite: every (high, target) pair, split into train and heldout by a stable hash.

What this is: a pure, deterministic generator, and the script that writes the suite into this package:

    python -m $package.make_tasks     # writes $package/data/tasks/$name/{train,heldout}.jsonl

A task's split is a hash of its id, so train and heldout stay disjoint whatever else changes. The ranges
of the env's few-shot examples (1-10 and 1-6) are in no split.

What this is not: the env, which checks every task it is given in `reset`.
"""

from __future__ import annotations

import argparse
import hashlib
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

HIGHS = (8, 16, 24, 32, 48, 63)  # binary search needs at most 6 guesses for each (2**6 - 1 = 63)
HELDOUT_PERCENT = 20
SPLITS = ("train", "heldout")
SUITE_DIR = Path(__file__).resolve().parent / "data" / "tasks" / "$name"


def make_task(high: int, target: int) -> dict[str, Any]:
    return {"id": f"$name-{high}-{target}", "high": high, "target": target}


def split_of(task_id: str) -> str:
    """'heldout' for a stable HELDOUT_PERCENT of task ids, else 'train'."""
    digest = int(hashlib.sha256(task_id.encode("utf-8")).hexdigest()[:8], 16)
    return "heldout" if digest % 100 < HELDOUT_PERCENT else "train"


def all_tasks() -> list[dict[str, Any]]:
    return [make_task(high, target) for high in HIGHS for target in range(1, high + 1)]


def write_suite(out: Path) -> dict[str, int]:
    """Write `<out>/train.jsonl` and `<out>/heldout.jsonl`; return how many tasks each got."""
    out.mkdir(parents=True, exist_ok=True)
    counts = {}
    for split in SPLITS:
        tasks = [task for task in all_tasks() if split_of(task["id"]) == split]
        (out / f"{split}.jsonl").write_text("".join(json.dumps(t) + "\\n" for t in tasks), encoding="utf-8")
        counts[split] = len(tasks)
    return counts


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Write the $name task suite (train and heldout).")
    parser.add_argument("--out", type=Path, default=SUITE_DIR, help="output folder")
    args = parser.parse_args(argv)
    print(f"wrote {write_suite(args.out)} tasks to {args.out}")


if __name__ == "__main__":
    main()
'''

POLICY = '''\
"""A scripted policy for $name: binary search, written as the text a model would write.

What this is: `solve(task, transcript)`, the next assistant turn, given the task record and the episode so
far (`transcript`: first observation, then each turn and the observation that answered it). The tests play
it through the real env service, and so does
`agentrl envs check $env_id --policy $package.policy:solve`.
If a script cannot reach `info["success"]`, no model will.

What this is not: part of training; the model never sees it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from agentrl.env import render_tool_call

FEEDBACK = re.compile(r"(?P<direction>higher|lower) than (?P<number>\\d+)")


def solve(task: Mapping[str, Any], transcript: Sequence[str]) -> str:
    """Guess the middle of the interval the feedback so far leaves open."""
    low, high = 1, int(task["high"])
    for observation in transcript[0::2]:
        said = FEEDBACK.search(observation)
        if said and said["direction"] == "higher":
            low = max(low, int(said["number"]) + 1)
        elif said:
            high = min(high, int(said["number"]) - 1)
    return render_tool_call("guess", {"number": (low + high) // 2})
'''

CONFIG = """\
# agentrl train --task $name
# The run config the $dist plugin ships. A configs/$name.yaml in the working directory
# wins over it, and `--config PATH` over both; keys not set here keep agentrl's defaults.
env:
  id: $env_id
  kwargs:
    max_guesses: 6
tasks:
  suite: $name  # $package/data/tasks/$name/, unless ./tasks/$name/ exists
model:
  name: smollm2-135m-instruct
sampling:
  temperature: 0.8
  max_new_tokens: 48
rollout:
  max_turns: 6
  max_context_tokens: 1536
train:
  steps: 4
  tasks_per_step: 4
  group_size: 6
credit:
  estimator: gigpo  # step-level credit: the episodes of a group meet in the same intervals
optim:
  lr: 1.0e-5
eval:
  num_tasks: 16
  temperature: 0.8
"""

TESTS = '''\
"""The $name plugin: the Env contract, the task suite, state keys, a scripted policy through the real env
service, and (slow) one training step from an empty folder."""

from __future__ import annotations

import asyncio
import importlib.metadata
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from agentrl.agent.parsing import parse_turn
from agentrl.client import EnvClient
from agentrl.env import StepResult, check_env, make
from agentrl.service.embedded import EmbeddedService
from agentrl.types import Action, ToolCall

from $package.env import ENV_ID, ${Name}Env, state_key
from $package.make_tasks import SPLITS, SUITE_DIR, all_tasks, write_suite
from $package.policy import solve


def load(split: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (SUITE_DIR / f"{split}.jsonl").open()]


def guess(number: int) -> Action:
    return Action(text="", tool_calls=(ToolCall("guess", {"number": number}),))


def test_check_env_passes_with_and_without_a_task() -> None:
    check_env(${Name}Env(), options={"task": load("train")[0]})
    check_env(${Name}Env())


def test_the_registered_id_makes_the_env() -> None:
    import $package  # noqa: F401  (registers the env, as the entry point does)

    assert isinstance(make(ENV_ID, max_guesses=3), ${Name}Env)


def test_the_shipped_suite_is_what_the_generator_writes(tmp_path: Path) -> None:
    write_suite(tmp_path)
    for split in SPLITS:
        assert (tmp_path / f"{split}.jsonl").read_text() == (SUITE_DIR / f"{split}.jsonl").read_text()
    train, heldout = ({task["id"] for task in load(split)} for split in SPLITS)
    assert train.isdisjoint(heldout) and train | heldout == {task["id"] for task in all_tasks()}


def test_a_right_guess_succeeds_and_a_turn_without_one_is_invalid() -> None:
    env = ${Name}Env()
    env.reset(options={"task": {"id": "t", "high": 8, "target": 3}})
    bad = env.step(Action(text="is it three?"))
    assert bad.info["invalid"] and bad.reward == 0.0 and not bad.terminated
    assert "guess" in bad.observation  # the error shows the call format
    won = env.step(guess(3))
    assert won.terminated and won.reward == 1.0 and won.info["success"]


def test_the_same_interval_is_the_same_state_whatever_the_path() -> None:
    env = ${Name}Env()
    keys = []
    for order in ([4, 12], [12, 4]):
        env.reset(options={"task": {"id": "t", "high": 16, "target": 9}})
        keys.append([env.step(guess(number)).info["state_key"] for number in order][-1])
    assert keys[0] == keys[1] == state_key("t", 5, 11)


async def play(url: str, task: dict[str, Any]) -> StepResult:
    """One episode of the scripted policy through the env service, its turns parsed as a model's are."""
    async with EnvClient(url) as client:
        start = await client.create_session(ENV_ID, task, seed=0)
        transcript = [start.observation]
        try:
            while True:
                turn = solve(task, transcript)
                result = await client.step(start.session_id, parse_turn(turn))
                transcript += [turn, result.observation]
                if result.terminated or result.truncated:
                    return result
        finally:
            await client.close_session(start.session_id)


def test_the_scripted_policy_wins_through_the_env_service(tmp_path: Path) -> None:
    with EmbeddedService(tmp_path / "service.log", preload=["$package"]) as service:
        results = [asyncio.run(play(service.url, task)) for task in load("heldout")[:4]]
    assert all(result.info["success"] and result.reward == 1.0 for result in results)


@pytest.mark.slow
def test_one_training_step_from_an_empty_folder(tmp_path: Path) -> None:
    if not importlib.metadata.entry_points(group="agentrl.envs", name="$name"):
        pytest.skip("install the plugin first (pip install -e .): agentrl finds its config by entry point")
    command = [
        sys.executable, "-m", "agentrl.cli.main", "train", "--task", "$name", "train.steps=1",
        "train.tasks_per_step=2", "train.group_size=2", "eval.before=false", "eval.after=false",
        f"runs_dir={tmp_path}", f"store.url=sqlite:///{tmp_path}/store.db",
    ]  # fmt: skip
    done = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=1800, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    assert list(tmp_path.glob("*/final"))
'''
