"""The sandboxed game `agentrl envs new NAME --sandboxed` writes: find a value in a file with shell commands
run in a Docker sandbox, then submit it.

What this is: `string.Template` texts of the plugin's env, task generator, scripted policy, run config and
tests (placeholders as in `agentrl.env.scaffold.common`), rendered by `agentrl.env.scaffold`; rendered for
NAME=lookup they are what docs/environments.md quotes for sandboxed envs. What this is not: an env agentrl
registers, or a sandbox (the rendered env takes its containers from `agentrl.sandbox.pool`).
"""

from __future__ import annotations

GAME = "find a value in a file with shell commands run in a Docker sandbox, then submit it."

ENV = '''\
"""${Name}Env: find a value in a file by running shell commands in a sandbox, then `submit` it.

What this is: the game of the $dist plugin. A task is {"id", "file", "content", "key",
"answer"}: the question asks for the value of `key` in /work/<file>, whose text is `content`. Two tools:
`shell(command)` runs a command in the episode's Docker sandbox and shows its exit code and output;
`submit(answer)` ends the episode, with reward 1 and `info["success"]` when the answer is right. A turn
without a usable call is invalid (`info["invalid"]`). After `max_steps` turns the episode is truncated.

The sandbox: taken from the process-wide warm pool on the episode's first command (an episode that submits
at once costs no container), given the task's file, and discarded at the next reset or at close, never
reused. A step waits on it, so the env keeps `blocking = True` (the default): the service steps it in a
worker thread. Sandbox failures raise `SandboxError`: infrastructure, so the runner re-plays the episode
instead of scoring it 0.

State key: the task and the last observation. Commands only read, so what tells two states apart is what
the agent has seen: episodes whose last command printed the same text are in the same state.

What this is not: the task generator (`$package.make_tasks`) or a policy (`$package.policy`).
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from typing import Any

from agentrl.env import Env, StepResult, render_tool_call, text_state_key, tool_spec
from agentrl.errors import EnvError
from agentrl.sandbox.base import ExecResult
from agentrl.sandbox.docker import DockerSandbox
from agentrl.sandbox.limits import SandboxConfig
from agentrl.sandbox.pool import acquire_sandbox, discard_sandbox
from agentrl.types import Action, ToolCall

from $package.make_tasks import make_task, split_of

ENV_ID = "$env_id"

SHELL = tool_spec(
    "shell",
    "Run a shell command in /work and see its output",
    {"command": {"type": "string", "description": "e.g. cat notes.txt"}},
)
SUBMIT = tool_spec(
    "submit",
    "Submit your final answer; this ends the episode",
    {"answer": {"type": "string", "description": "the value only"}},
)
ARGUMENT = {"shell": "command", "submit": "answer"}  # each tool's one argument
FORMAT_HELP = (
    "Call one tool per turn, e.g. "
    + render_tool_call("shell", {"command": "cat notes.txt"})
    + " or "
    + render_tool_call("submit", {"answer": "blue"})
)


def question(task: Mapping[str, Any]) -> str:
    return f"What is the value of {task['key']} in /work/{task['file']}? Submit the value only."


def command_observation(result: ExecResult) -> str:
    """The exit code, a note when the command was killed, then its output."""
    header = f"exit code {result.exit_code}" + (" (killed: time limit)" if result.timed_out else "")
    return f"{header}\\n{result.stdout + result.stderr or '(no output)'}"


def state_key(task_id: str, observation: str) -> str:
    return text_state_key(f"{task_id}\\0{observation}")


def solved_example(file: str, content: str, key: str, answer: str) -> list[dict[str, Any]]:
    """One solved episode as chat messages, in the env's own words, ending on the submit."""
    shell = {"name": "shell", "arguments": {"command": f"cat {file}"}}
    submit = {"name": "submit", "arguments": {"answer": answer}}
    return [
        {"role": "user", "content": question({"file": file, "key": key})},
        {"role": "assistant", "content": "", "tool_calls": [shell]},
        {"role": "tool", "content": f"exit code 0\\n{content}"},
        {"role": "assistant", "content": "", "tool_calls": [submit]},
    ]


def validate_task(task: Any) -> dict[str, Any]:
    """The task record, checked; the `EnvError` names the field that is wrong."""
    if not isinstance(task, Mapping):
        raise EnvError(f"options['task'] must be a task record (a dict), got {type(task).__name__}")
    for field in ("id", "file", "content", "key", "answer"):
        if not isinstance(task.get(field), str) or not task[field]:
            raise EnvError(f"$name task is missing {field!r} (a non-empty string)")
    if "/" in task["file"]:
        raise EnvError(f"$name task {task['id']!r}: 'file' must be a plain file name, got {task['file']!r}")
    return dict(task)


def tool_argument(call: ToolCall) -> str | None:
    """The call's one argument as a non-empty string (a number counts), or None."""
    value = call.arguments.get(ARGUMENT.get(call.name, ""))
    if isinstance(value, int | float) and not isinstance(value, bool):
        value = str(value)
    return value if isinstance(value, str) and value.strip() and len(call.arguments) == 1 else None


class ${Name}Env(Env):
    """Find a value with shell commands in a sandbox; see the module docstring."""

    tools = (SHELL, SUBMIT)
    # two solved episodes on files no task uses: a small model copies their format
    examples = (
        *solved_example("example.txt", "size = 7\\ncolor = teal\\n", "color", "teal"),
        *solved_example("demo.cfg", "mode = fast\\nlevel = 3\\n", "level", "3"),
    )

    def __init__(self, max_steps: int = 4, pool_size: int = 4, sandbox: SandboxConfig | None = None) -> None:
        """pool_size: warm sandboxes kept in the process-wide pool (0: a fresh container per episode)."""
        super().__init__()
        self.max_steps = max_steps
        self.pool_size = pool_size
        self.sandbox_config = sandbox or SandboxConfig()
        self.sandbox_labels = {"agentrl.env": ENV_ID}
        self._sandbox: DockerSandbox | None = None
        self._task: dict[str, Any] | None = None
        self._steps = 0

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[str, dict[str, Any]]:
        super().reset(seed=seed)  # seeds self.np_random
        self._close_sandbox()  # a fresh sandbox per episode: nothing leaks from the last one
        task = (options or {}).get("task")
        self._task = validate_task(task) if task is not None else self._draw_task()
        self._steps = 0
        observation = question(self._task)
        return observation, {"state_key": state_key(self._task["id"], observation)}

    def step(self, action: Action) -> StepResult:
        task = self._task
        assert task is not None  # Env's guard: step() runs only after a successful reset()
        self._steps += 1
        observation, reward, terminated, outcome = self._dispatch(action, task)
        truncated = not terminated and self._steps >= self.max_steps
        info = {"state_key": state_key(task["id"], observation), "invalid": False, "success": False}
        return StepResult(observation, reward, terminated, truncated, {**info, **outcome})

    def close(self) -> None:
        self._close_sandbox()
        super().close()

    def _dispatch(self, action: Action, task: Mapping[str, Any]) -> tuple[str, float, bool, dict[str, Any]]:
        call = action.tool_calls[0] if action.tool_calls else None
        argument = tool_argument(call) if call is not None else None
        if call is None or argument is None:
            problem = action.parse_error or "your turn has no usable shell or submit call"
            return f"Error: {problem}. {FORMAT_HELP}", 0.0, False, {"invalid": True}
        if call.name == "submit":
            success = argument.strip() == task["answer"]
            return ("Correct." if success else "Incorrect."), float(success), True, {"success": success}
        return command_observation(self._ensure_sandbox().exec(argument)), 0.0, False, {}

    def _ensure_sandbox(self) -> DockerSandbox:
        if self._sandbox is None:
            assert self._task is not None
            self._sandbox = acquire_sandbox(self.sandbox_config, self.sandbox_labels, self.pool_size)
            path = f"{self.sandbox_config.workdir}/{self._task['file']}"
            self._sandbox.write_file(path, self._task["content"])
        return self._sandbox

    def _close_sandbox(self) -> None:
        sandbox, self._sandbox = self._sandbox, None
        if sandbox is not None:
            discard_sandbox(sandbox, self.sandbox_config, self.sandbox_labels, self.pool_size)

    def _draw_task(self) -> dict[str, Any]:
        """A train task drawn from the seed: Gymnasium's env checker resets without one."""
        while True:
            task = make_task(random.Random(int(self.np_random.integers(1 << 30))))
            if split_of(task["id"]) == "train":
                return task
'''

MAKE_TASKS = '''\
"""The $name task suite: small "key = value" files and which key to look up, split by a stable hash.

What this is: a pure, deterministic generator, and the script that writes the suite into this package:

    python -m $package.make_tasks     # writes $package/data/tasks/$name/{train,heldout}.jsonl

Candidate i of a seed comes from `random.Random(f"{seed}:{i}")`, so every task is reproducible on its own;
its split is a hash of its id, so train and heldout are disjoint by construction. The files of the env's
few-shot examples (example.txt, demo.cfg) are in no split.

What this is not: the env, which checks every task it is given in `reset`.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
from collections.abc import Sequence
from pathlib import Path
from typing import Any

KEYS = ("alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel")
WORDS = ("amber", "basil", "cedar", "dune", "ember", "fern", "glade", "harbor", "iris", "juniper")
FILES = ("inventory.txt", "settings.txt", "labels.txt")
COUNTS = {"train": 400, "heldout": 100}
HELDOUT_PERCENT = 20
SUITE_DIR = Path(__file__).resolve().parent / "data" / "tasks" / "$name"


def make_task(rng: random.Random) -> dict[str, Any]:
    """One task: a file of four "key = value" lines and the key whose value is the answer."""
    keys = rng.sample(KEYS, 4)
    values = [f"{rng.choice(WORDS)}{rng.randint(10, 99)}" for _ in keys]
    file = rng.choice(FILES)
    content = "".join(f"{key} = {value}\\n" for key, value in zip(keys, values, strict=True))
    index = rng.randrange(len(keys))
    digest = hashlib.sha256(f"{file}\\0{content}\\0{keys[index]}".encode()).hexdigest()
    return {"id": f"$name-{digest[:12]}", "file": file, "content": content, "key": keys[index],
            "answer": values[index]}  # fmt: skip


def split_of(task_id: str) -> str:
    """'heldout' for a stable HELDOUT_PERCENT of task ids, else 'train'."""
    digest = int(hashlib.sha256(task_id.encode("utf-8")).hexdigest()[:8], 16)
    return "heldout" if digest % 100 < HELDOUT_PERCENT else "train"


def generate(split: str, count: int, seed: int = 0) -> list[dict[str, Any]]:
    """The first `count` distinct tasks of `split` among the seed's candidates."""
    tasks: dict[str, dict[str, Any]] = {}
    index = 0
    while len(tasks) < count:
        task = make_task(random.Random(f"{seed}:{index}"))
        index += 1
        if split_of(task["id"]) == split:
            tasks.setdefault(task["id"], task)
    return list(tasks.values())


def write_suite(out: Path, seed: int = 0) -> dict[str, int]:
    """Write `<out>/train.jsonl` and `<out>/heldout.jsonl`; return how many tasks each got."""
    out.mkdir(parents=True, exist_ok=True)
    for split, count in COUNTS.items():
        lines = "".join(json.dumps(task) + "\\n" for task in generate(split, count, seed))
        (out / f"{split}.jsonl").write_text(lines, encoding="utf-8")
    return dict(COUNTS)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Write the $name task suite (train and heldout).")
    parser.add_argument("--out", type=Path, default=SUITE_DIR, help="output folder")
    args = parser.parse_args(argv)
    print(f"wrote {write_suite(args.out)} tasks to {args.out}")


if __name__ == "__main__":
    main()
'''

POLICY = '''\
"""A scripted policy for $name: grep the key, then submit the value the output shows.

What this is: `solve(task, transcript)`, the next assistant turn, given the task record and the episode so
far (`transcript`: first observation, then each turn and the observation that answered it). The tests play
it through the real env service, and so does
`agentrl envs check $env_id --policy $package.policy:solve`.
If a script cannot reach `info["success"]`, no model will.

What this is not: part of training; the model never sees it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from agentrl.env import render_tool_call


def solve(task: Mapping[str, Any], transcript: Sequence[str]) -> str:
    """First a grep for the key's line, then a submit of what follows its " = "."""
    if len(transcript) == 1:
        return render_tool_call("shell", {"command": f"grep '^{task['key']} = ' {task['file']}"})
    value = transcript[-1].strip().rsplit(" = ", 1)[-1]
    return render_tool_call("submit", {"answer": value})
'''

CONFIG = """\
# agentrl train --task $name
# The run config the $dist plugin ships. A configs/$name.yaml in the working directory
# wins over it, and `--config PATH` over both; keys not set here keep agentrl's defaults.
env:
  id: $env_id
  kwargs:
    max_steps: 4
    pool_size: 4  # warm sandboxes; each episode takes one and discards it
tasks:
  suite: $name  # $package/data/tasks/$name/, unless ./tasks/$name/ exists
model:
  name: smollm2-135m-instruct
sampling:
  temperature: 0.7
  max_new_tokens: 48
rollout:
  max_turns: 4
  max_context_tokens: 1536
train:
  steps: 4
  tasks_per_step: 4
  group_size: 6
optim:
  lr: 1.0e-5
eval:
  num_tasks: 16
  temperature: 0.7
"""

TESTS = '''\
"""The $name plugin: the Env contract, the task suite, a scripted policy through the real env service (needs
Docker), and (slow) one training step from an empty folder."""

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

from $package.env import ENV_ID, ${Name}Env
from $package.make_tasks import COUNTS, SUITE_DIR, write_suite
from $package.policy import solve


def load(split: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (SUITE_DIR / f"{split}.jsonl").open()]


def test_check_env_passes_with_and_without_a_task() -> None:
    # no command runs here, so no sandbox is started: these tests need no Docker
    check_env(${Name}Env(), options={"task": load("train")[0]})
    check_env(${Name}Env())


def test_the_registered_id_makes_the_env() -> None:
    import $package  # noqa: F401  (registers the env, as the entry point does)

    assert isinstance(make(ENV_ID, max_steps=3), ${Name}Env)


def test_the_shipped_suite_is_what_the_generator_writes(tmp_path: Path) -> None:
    write_suite(tmp_path)
    for split in COUNTS:
        assert (tmp_path / f"{split}.jsonl").read_text() == (SUITE_DIR / f"{split}.jsonl").read_text()
    train, heldout = ({task["id"] for task in load(split)} for split in COUNTS)
    assert train.isdisjoint(heldout)


def test_a_right_submit_succeeds_and_a_turn_without_a_call_is_invalid() -> None:
    env = ${Name}Env()
    task = load("heldout")[0]
    env.reset(options={"task": task})
    bad = env.step(Action(text="I would look at the file"))
    assert bad.info["invalid"] and bad.reward == 0.0 and not bad.terminated
    won = env.step(Action(text="", tool_calls=(ToolCall("submit", {"answer": task["answer"]}),)))
    assert won.terminated and won.reward == 1.0 and won.info["success"]


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


@pytest.mark.docker
def test_the_scripted_policy_wins_through_the_env_service(tmp_path: Path) -> None:
    with EmbeddedService(tmp_path / "service.log", preload=["$package"]) as service:
        results = [asyncio.run(play(service.url, task)) for task in load("heldout")[:2]]
    assert all(result.info["success"] and result.reward == 1.0 for result in results)


@pytest.mark.slow
@pytest.mark.docker
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
